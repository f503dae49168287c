//! [`MemInfoBlock`]: the per-allocation-context statistics the MemProf runtime keeps
//! (`MemInfoBlock` in LLVM `llvm/include/llvm/ProfileData/MemProfData.inc`, fields listed in
//! `MIBEntryDef.inc`), with its packed on-disk layout and its merge rule.

/// Bytes of a packed `MemInfoBlock` in raw versions 4 and 5 (25 fields + histogram size and
/// pointer); version 3 had 132 (no histogram).
pub const MIB_SIZE_V4: usize = 144;

/// Names of the 25 scalar fields in `MIBEntryDef.inc` order (tags 1..=25). They are also the
/// keys of a `MemInfoBlock` in LLVM's MemProf YAML.
pub const MIB_FIELD_NAMES: [&str; 25] = [
    "AllocCount",
    "TotalAccessCount",
    "MinAccessCount",
    "MaxAccessCount",
    "TotalSize",
    "MinSize",
    "MaxSize",
    "AllocTimestamp",
    "DeallocTimestamp",
    "TotalLifetime",
    "MinLifetime",
    "MaxLifetime",
    "AllocCpuId",
    "DeallocCpuId",
    "NumMigratedCpu",
    "NumLifetimeOverlaps",
    "NumSameAllocCpu",
    "NumSameDeallocCpu",
    "DataTypeId",
    "TotalAccessDensity",
    "MinAccessDensity",
    "MaxAccessDensity",
    "TotalLifetimeAccessDensity",
    "MinLifetimeAccessDensity",
    "MaxLifetimeAccessDensity",
];

/// Byte width of each field of [`MIB_FIELD_NAMES`] in the packed struct (4 or 8).
const MIB_FIELD_WIDTHS: [usize; 25] = [
    4, 8, 8, 8, 8, 4, 4, 4, 4, 8, 4, 4, 4, 4, 4, 4, 4, 4, 8, 8, 4, 4, 8, 4, 4,
];

/// Statistics of one allocation context. Lifetimes and timestamps are milliseconds; densities
/// are the runtime's fixed-point values (access density ×100 per byte, lifetime access density
/// ×100 accesses per byte per second).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)] // The fields are LLVM's, documented in MIBEntryDef.inc; names are 1:1.
pub struct MemInfoBlock {
    pub alloc_count: u32,
    pub total_access_count: u64,
    pub min_access_count: u64,
    pub max_access_count: u64,
    pub total_size: u64,
    pub min_size: u32,
    pub max_size: u32,
    pub alloc_timestamp: u32,
    pub dealloc_timestamp: u32,
    pub total_lifetime: u64,
    pub min_lifetime: u32,
    pub max_lifetime: u32,
    pub alloc_cpu_id: u32,
    pub dealloc_cpu_id: u32,
    pub num_migrated_cpu: u32,
    pub num_lifetime_overlaps: u32,
    pub num_same_alloc_cpu: u32,
    pub num_same_dealloc_cpu: u32,
    pub data_type_id: u64,
    pub total_access_density: u64,
    pub min_access_density: u32,
    pub max_access_density: u32,
    pub total_lifetime_access_density: u64,
    pub min_lifetime_access_density: u32,
    pub max_lifetime_access_density: u32,
    /// Access counts per 8-byte granule of the allocation (histogram mode only), decoded.
    pub access_histogram: Vec<u64>,
}

impl MemInfoBlock {
    /// Decodes the 25 scalar fields of a packed struct (little-endian). Returns `None` when
    /// `bytes` is shorter than the 132 bytes they take. The histogram is not read here.
    pub fn from_packed(bytes: &[u8]) -> Option<MemInfoBlock> {
        let mut values = [0u64; 25];
        let mut off = 0;
        for (value, width) in values.iter_mut().zip(MIB_FIELD_WIDTHS) {
            let field = bytes.get(off..off + width)?;
            *value = match width {
                4 => u64::from(u32::from_le_bytes(field.try_into().ok()?)),
                _ => u64::from_le_bytes(field.try_into().ok()?),
            };
            off += width;
        }
        let mut mib = MemInfoBlock::default();
        for (name, value) in MIB_FIELD_NAMES.iter().zip(values) {
            mib.set_field(name, value);
        }
        Some(mib)
    }

    /// The fields as `(YAML name, value)` in tag order.
    pub fn fields(&self) -> [(&'static str, u64); 25] {
        let v = [
            u64::from(self.alloc_count),
            self.total_access_count,
            self.min_access_count,
            self.max_access_count,
            self.total_size,
            u64::from(self.min_size),
            u64::from(self.max_size),
            u64::from(self.alloc_timestamp),
            u64::from(self.dealloc_timestamp),
            self.total_lifetime,
            u64::from(self.min_lifetime),
            u64::from(self.max_lifetime),
            u64::from(self.alloc_cpu_id),
            u64::from(self.dealloc_cpu_id),
            u64::from(self.num_migrated_cpu),
            u64::from(self.num_lifetime_overlaps),
            u64::from(self.num_same_alloc_cpu),
            u64::from(self.num_same_dealloc_cpu),
            self.data_type_id,
            self.total_access_density,
            u64::from(self.min_access_density),
            u64::from(self.max_access_density),
            self.total_lifetime_access_density,
            u64::from(self.min_lifetime_access_density),
            u64::from(self.max_lifetime_access_density),
        ];
        std::array::from_fn(|i| (MIB_FIELD_NAMES[i], v[i]))
    }

    /// Sets the field named `name` (a [`MIB_FIELD_NAMES`] entry; u32 fields saturate).
    /// Returns false for an unknown name.
    pub fn set_field(&mut self, name: &str, value: u64) -> bool {
        let narrow = u32::try_from(value).unwrap_or(u32::MAX);
        match name {
            "AllocCount" => self.alloc_count = narrow,
            "TotalAccessCount" => self.total_access_count = value,
            "MinAccessCount" => self.min_access_count = value,
            "MaxAccessCount" => self.max_access_count = value,
            "TotalSize" => self.total_size = value,
            "MinSize" => self.min_size = narrow,
            "MaxSize" => self.max_size = narrow,
            "AllocTimestamp" => self.alloc_timestamp = narrow,
            "DeallocTimestamp" => self.dealloc_timestamp = narrow,
            "TotalLifetime" => self.total_lifetime = value,
            "MinLifetime" => self.min_lifetime = narrow,
            "MaxLifetime" => self.max_lifetime = narrow,
            "AllocCpuId" => self.alloc_cpu_id = narrow,
            "DeallocCpuId" => self.dealloc_cpu_id = narrow,
            "NumMigratedCpu" => self.num_migrated_cpu = narrow,
            "NumLifetimeOverlaps" => self.num_lifetime_overlaps = narrow,
            "NumSameAllocCpu" => self.num_same_alloc_cpu = narrow,
            "NumSameDeallocCpu" => self.num_same_dealloc_cpu = narrow,
            "DataTypeId" => self.data_type_id = value,
            "TotalAccessDensity" => self.total_access_density = value,
            "MinAccessDensity" => self.min_access_density = narrow,
            "MaxAccessDensity" => self.max_access_density = narrow,
            "TotalLifetimeAccessDensity" => self.total_lifetime_access_density = value,
            "MinLifetimeAccessDensity" => self.min_lifetime_access_density = narrow,
            "MaxLifetimeAccessDensity" => self.max_lifetime_access_density = narrow,
            _ => return false,
        }
        true
    }

    /// Folds `newer` into `self` with the runtime's `MemInfoBlock::Merge` rule: counts and
    /// totals add (saturating), minima/maxima keep the extreme, timestamps and CPU ids take
    /// `newer`'s, access histograms add element-wise keeping the longer one. Since the compiler
    /// only uses `Total*/AllocCount` averages, summing totals weights every average by count.
    pub fn merge(&mut self, newer: &MemInfoBlock) {
        // An empty record (AllocCount 0) has no meaningful minima: take the other's.
        if self.alloc_count == 0 {
            let mut merged = newer.clone();
            merged.total_access_count = merged
                .total_access_count
                .saturating_add(self.total_access_count);
            *self = merged;
            return;
        }
        self.alloc_count = self.alloc_count.saturating_add(newer.alloc_count);
        self.total_access_count = self
            .total_access_count
            .saturating_add(newer.total_access_count);
        self.min_access_count = self.min_access_count.min(newer.min_access_count);
        self.max_access_count = self.max_access_count.max(newer.max_access_count);
        self.total_size = self.total_size.saturating_add(newer.total_size);
        self.min_size = self.min_size.min(newer.min_size);
        self.max_size = self.max_size.max(newer.max_size);
        self.alloc_timestamp = newer.alloc_timestamp;
        self.dealloc_timestamp = newer.dealloc_timestamp;
        self.total_lifetime = self.total_lifetime.saturating_add(newer.total_lifetime);
        self.min_lifetime = self.min_lifetime.min(newer.min_lifetime);
        self.max_lifetime = self.max_lifetime.max(newer.max_lifetime);
        self.alloc_cpu_id = newer.alloc_cpu_id;
        self.dealloc_cpu_id = newer.dealloc_cpu_id;
        self.num_migrated_cpu = self.num_migrated_cpu.saturating_add(newer.num_migrated_cpu);
        self.num_lifetime_overlaps = self
            .num_lifetime_overlaps
            .saturating_add(newer.num_lifetime_overlaps);
        self.num_same_alloc_cpu = self
            .num_same_alloc_cpu
            .saturating_add(newer.num_same_alloc_cpu);
        self.num_same_dealloc_cpu = self
            .num_same_dealloc_cpu
            .saturating_add(newer.num_same_dealloc_cpu);
        self.total_access_density = self
            .total_access_density
            .saturating_add(newer.total_access_density);
        self.min_access_density = self.min_access_density.min(newer.min_access_density);
        self.max_access_density = self.max_access_density.max(newer.max_access_density);
        self.total_lifetime_access_density = self
            .total_lifetime_access_density
            .saturating_add(newer.total_lifetime_access_density);
        self.min_lifetime_access_density = self
            .min_lifetime_access_density
            .min(newer.min_lifetime_access_density);
        self.max_lifetime_access_density = self
            .max_lifetime_access_density
            .max(newer.max_lifetime_access_density);
        if newer.access_histogram.len() > self.access_histogram.len() {
            self.access_histogram
                .resize(newer.access_histogram.len(), 0);
        }
        for (mine, theirs) in self
            .access_histogram
            .iter_mut()
            .zip(&newer.access_histogram)
        {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// Average lifetime in milliseconds (`TotalLifetime / AllocCount`), 0 without allocations.
    pub fn average_lifetime_ms(&self) -> u64 {
        self.total_lifetime
            .checked_div(u64::from(self.alloc_count))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(fields: &[u64; 25]) -> Vec<u8> {
        let mut out = Vec::new();
        for (v, w) in fields.iter().zip(MIB_FIELD_WIDTHS) {
            if w == 4 {
                out.extend_from_slice(&(*v as u32).to_le_bytes());
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    #[test]
    fn packed_layout_offsets_match_llvm() {
        // The 25 scalar fields take 132 bytes (MEMPROF_V3_MIB_SIZE); v4 adds u32 + u64.
        assert_eq!(MIB_FIELD_WIDTHS.iter().sum::<usize>(), 132);
        assert_eq!(132 + 4 + 8, MIB_SIZE_V4);
        let values: [u64; 25] = std::array::from_fn(|i| i as u64 + 1);
        let bytes = packed(&values);
        // TotalSize at byte 28, TotalLifetimeAccessDensity at byte 116.
        assert_eq!(&bytes[28..36], &5u64.to_le_bytes());
        assert_eq!(&bytes[116..124], &23u64.to_le_bytes());
        let mib = MemInfoBlock::from_packed(&bytes).unwrap();
        assert_eq!(mib.alloc_count, 1);
        assert_eq!(mib.total_size, 5);
        assert_eq!(mib.total_lifetime, 10);
        assert_eq!(mib.max_lifetime_access_density, 25);
        assert_eq!(mib.fields().map(|(_, v)| v), values);
        assert_eq!(MemInfoBlock::from_packed(&bytes[..131]), None);
    }

    #[test]
    fn merge_sums_totals_keeps_extremes_and_merges_histograms() {
        let mut a = MemInfoBlock {
            alloc_count: 2,
            total_size: 128,
            min_size: 64,
            max_size: 64,
            total_lifetime: 10,
            min_lifetime: 4,
            max_lifetime: 6,
            alloc_timestamp: 5,
            access_histogram: vec![1, 2],
            ..Default::default()
        };
        let b = MemInfoBlock {
            alloc_count: 1,
            total_size: 4096,
            min_size: 4096,
            max_size: 4096,
            total_lifetime: 300,
            min_lifetime: 300,
            max_lifetime: 300,
            alloc_timestamp: 9,
            access_histogram: vec![10, 20, 30],
            ..Default::default()
        };
        a.merge(&b);
        assert_eq!(a.alloc_count, 3);
        assert_eq!(a.total_size, 4224);
        assert_eq!((a.min_size, a.max_size), (64, 4096));
        assert_eq!((a.min_lifetime, a.max_lifetime), (4, 300));
        assert_eq!(a.alloc_timestamp, 9);
        assert_eq!(a.access_histogram, vec![11, 22, 30]);
        // (10 + 300) / 3, the count-weighted average of 5 ms and 300 ms.
        assert_eq!(a.average_lifetime_ms(), 103);

        let mut empty = MemInfoBlock::default();
        empty.merge(&b);
        assert_eq!(empty, b);
    }
}
