//! The software LBR recorder: runs a program under ptrace single-step and records every taken branch.
