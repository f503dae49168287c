//! Profile generation from counters: CS probe, CS line, flat line (AutoFDO), flat probe.
