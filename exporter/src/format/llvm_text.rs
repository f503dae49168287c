//! LLVM text sample profile writer (`--format=text`).
