//! DWARF: line tables with inline frames, subprogram ranges, discriminators.
