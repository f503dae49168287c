//! LLVM extensible binary sample profile (`--format=extbinary`) writer.
