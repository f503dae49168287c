//! Pseudo probes: the `.pseudo_probe_desc` and `.pseudo_probe` sections.
