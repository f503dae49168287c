//! Helpers shared by the end-to-end tests: building the corpus and locating tools.
