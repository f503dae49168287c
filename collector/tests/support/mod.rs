//! Helpers shared by the collector's integration tests.

/// The samples of `perf script -F event,time,ip -G --ns` text (`" 1763.381688173:  cpu-clock:
/// ffffffff81b75d9a"` per line): (event name, time in ns, IP).
pub fn event_time_ip_samples(text: &str) -> Vec<(String, u64, u64)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split(':').map(str::trim);
            let (time, name, ip) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            let (s, ns) = time.split_once('.').unwrap();
            let time = s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap();
            (name.to_string(), time, u64::from_str_radix(ip, 16).unwrap())
        })
        .collect()
}
