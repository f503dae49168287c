//! [`ProfiledBinary`] as the unwinder sees it: [`unwinder::BinaryLoadInfo`] for address
//! placement. (Profile generation's `BinaryView` impl lives with it in `generate/`.)

use super::ProfiledBinary;

impl ProfiledBinary {
    /// What the unwinder's address placement needs.
    pub fn load_info(&self) -> unwinder::BinaryLoadInfo {
        unwinder::BinaryLoadInfo {
            name: self.name.clone(),
            preferred_base: self.preferred_base(),
            text_segment_offsets: self.text_segment_offsets().to_vec(),
            preferred_text_segment_addresses: self.preferred_text_segment_addresses().to_vec(),
            kernel: false,
        }
    }
}
