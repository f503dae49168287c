//! [`RingBuffer`]: the consumer side of a perf mmap ring, over the kernel's mapping or over
//! a heap buffer with the same layout (tests and replay).
//!
//! Layout (`struct perf_event_mmap_page`, perf_event.h): page 0 is the control page, 1088
//! bytes used; `data_head` at byte 1024, `data_tail` at 1032, `data_offset` at 1040,
//! `data_size` at 1048. The data area is `2^n` pages. `data_head` and `data_tail` are
//! free-running byte counters; the buffer is indexed with `pos & (data_size - 1)`.
//!
//! Protocol (kernel/events/ring_buffer.c, as quoted in tools/include/linux/ring_buffer.h):
//! the kernel writes records, then publishes `data_head` (smp_wmb); the reader loads
//! `data_head` with acquire ordering, reads the records, then stores `data_tail` with
//! release ordering, which gives the space back. Every record size is a multiple of 8 and
//! the data area is a multiple of the page size, so an 8-byte header never straddles the
//! end; a record body may, and is then copied out into a scratch buffer.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::perf_event_mmap_page;

use super::LiveError;

/// Byte offset of `data_head` in the control page.
pub const DATA_HEAD_OFFSET: usize = 1024;
/// Byte offset of `data_tail`.
pub const DATA_TAIL_OFFSET: usize = 1032;
/// Byte offset of `data_offset` (4.1+).
pub const DATA_OFFSET_OFFSET: usize = 1040;
/// Byte offset of `data_size`.
pub const DATA_SIZE_OFFSET: usize = 1048;
/// Bytes of the control page the ABI defines.
pub const MMAP_PAGE_SIZE: usize = 1088;
/// The largest data area accepted (`2^n` pages, at most this many bytes).
pub const MAX_RING_BYTES: usize = 1 << 30;

// The bindings' struct must agree with the offsets the reader uses.
const _: () = assert!(std::mem::size_of::<perf_event_mmap_page>() == MMAP_PAGE_SIZE);
const _: () = assert!(std::mem::offset_of!(perf_event_mmap_page, data_head) == DATA_HEAD_OFFSET);
const _: () = assert!(std::mem::offset_of!(perf_event_mmap_page, data_tail) == DATA_TAIL_OFFSET);
const _: () =
    assert!(std::mem::offset_of!(perf_event_mmap_page, data_offset) == DATA_OFFSET_OFFSET);
const _: () = assert!(std::mem::offset_of!(perf_event_mmap_page, data_size) == DATA_SIZE_OFFSET);

/// `struct perf_event_header`: the 8 bytes in front of every record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// `PERF_RECORD_*`.
    pub record_type: u32,
    /// `misc` bits.
    pub misc: u16,
    /// Whole record size, header included.
    pub size: u16,
}

impl RecordHeader {
    /// Decodes the 8 header bytes (little-endian).
    pub fn from_bytes(b: [u8; 8]) -> RecordHeader {
        RecordHeader {
            record_type: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            misc: u16::from_le_bytes([b[4], b[5]]),
            size: u16::from_le_bytes([b[6], b[7]]),
        }
    }
}

/// What one [`RingBuffer::drain`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Records handed to the callback.
    pub records: u64,
    /// Bytes consumed.
    pub bytes: u64,
    /// Records that wrapped the end of the data area (copied out).
    pub wrapped: u64,
}

enum Memory {
    /// A kernel mapping of `len` bytes, unmapped on drop.
    Mmap { ptr: NonNull<u8>, len: usize },
    /// A heap buffer (u64s, so the control words are aligned).
    Heap(#[allow(dead_code)] Box<[u64]>),
}

/// The reader of one ring (see the module docs). Owns its memory.
pub struct RingBuffer {
    control: NonNull<u8>,
    data: NonNull<u8>,
    data_size: u64,
    memory: Memory,
    /// The event's fd (a duplicate), polled by [`RingBuffer::wait`]; none for heap rings.
    wake: Option<std::os::fd::OwnedFd>,
}

// SAFETY: the ring's memory is owned by the RingBuffer (a private mapping of an fd or a
// heap buffer); only the kernel writes the data area concurrently, under the protocol.
unsafe impl Send for RingBuffer {}

fn check_pages(pages: usize) -> Result<(), LiveError> {
    let refuse = |what| Err(LiveError::RingSize { pages, what });
    if pages == 0 || !pages.is_power_of_two() {
        return refuse("must be a power of two");
    }
    if pages.saturating_mul(page_size()) > MAX_RING_BYTES {
        return refuse("larger than 1 GiB");
    }
    Ok(())
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

impl RingBuffer {
    /// Maps the ring of a perf event fd: `1 + data_pages` pages, read-write (so the kernel
    /// honours `data_tail` and never overwrites unread records).
    pub fn map(
        fd: std::os::fd::BorrowedFd<'_>,
        data_pages: usize,
        cpu: i32,
    ) -> Result<Self, LiveError> {
        use std::os::fd::AsRawFd;
        check_pages(data_pages)?;
        let len = (1 + data_pages) * page_size();
        // SAFETY: a fresh shared mapping of a perf fd; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(LiveError::Mmap {
                cpu,
                pages: data_pages,
                source: std::io::Error::last_os_error(),
            });
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(LiveError::RingCorrupt {
            offset: 0,
            what: "mmap returned null",
        })?;
        let memory = Memory::Mmap { ptr: base, len };
        // SAFETY: the control page is mapped and its ABI fields are u64-aligned.
        let (offset, size) = unsafe {
            let o = (*base.as_ptr().add(DATA_OFFSET_OFFSET).cast::<AtomicU64>())
                .load(Ordering::Acquire);
            let s =
                (*base.as_ptr().add(DATA_SIZE_OFFSET).cast::<AtomicU64>()).load(Ordering::Acquire);
            (o, s)
        };
        // Kernels before 4.1 leave data_offset/data_size 0: the data follows page 0.
        let (offset, size) = if size == 0 {
            (page_size() as u64, (data_pages * page_size()) as u64)
        } else {
            (offset, size)
        };
        let mut ring = Self::from_parts(base, offset, size, len, memory)?;
        // A failed dup only costs the wake-ups: `wait` then sleeps its whole timeout.
        ring.wake = fd.try_clone_to_owned().ok();
        Ok(ring)
    }

    /// Waits until the kernel signals unread records (the event's `wakeup_watermark`
    /// crossed; see [`crate::live::EventAttr::wakeup_watermark`]) or `timeout` passed,
    /// whichever comes first. A heap ring has no one to signal it: it sleeps `timeout`.
    pub fn wait(&self, timeout: std::time::Duration) {
        use std::os::fd::AsRawFd;
        let Some(fd) = &self.wake else {
            std::thread::sleep(timeout);
            return;
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, for the call's duration. EINTR or an error just ends
        // the wait early; the caller drains and waits again. A hang-up (the event's task
        // gone) would return at once: sleep instead, so a reader never spins.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 && pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            std::thread::sleep(timeout);
        }
    }

    /// A heap ring with the kernel's layout: a control page then `data_pages` pages of
    /// `page_size` bytes, `data_offset`/`data_size` filled in, head = tail = 0. Used by
    /// tests and to replay recorded records through the same reader.
    pub fn in_memory(data_pages: usize, page_size: usize) -> Result<Self, LiveError> {
        if page_size < MMAP_PAGE_SIZE || !page_size.is_power_of_two() {
            return Err(LiveError::RingSize {
                pages: data_pages,
                what: "page size must be a power of two of at least 1088 bytes",
            });
        }
        if data_pages == 0
            || !data_pages.is_power_of_two()
            || data_pages * page_size > MAX_RING_BYTES
        {
            return Err(LiveError::RingSize {
                pages: data_pages,
                what: "must be a power of two, at most 1 GiB",
            });
        }
        let len = (1 + data_pages) * page_size;
        let mut words = vec![0u64; len / 8].into_boxed_slice();
        words[DATA_OFFSET_OFFSET / 8] = page_size as u64;
        words[DATA_SIZE_OFFSET / 8] = (data_pages * page_size) as u64;
        let base = NonNull::new(words.as_mut_ptr().cast::<u8>()).ok_or(LiveError::RingCorrupt {
            offset: 0,
            what: "null heap buffer",
        })?;
        Self::from_parts(
            base,
            page_size as u64,
            (data_pages * page_size) as u64,
            len,
            Memory::Heap(words),
        )
    }

    fn from_parts(
        base: NonNull<u8>,
        offset: u64,
        size: u64,
        len: usize,
        memory: Memory,
    ) -> Result<Self, LiveError> {
        let bad = |what| LiveError::RingCorrupt { offset: 0, what };
        if !size.is_power_of_two() {
            drop(memory);
            return Err(bad("data_size is not a power of two"));
        }
        if offset < MMAP_PAGE_SIZE as u64
            || offset.checked_add(size).is_none_or(|end| end > len as u64)
        {
            drop(memory);
            return Err(bad("data area outside the mapping"));
        }
        // SAFETY: offset + size <= len was checked above.
        let data = unsafe { NonNull::new_unchecked(base.as_ptr().add(offset as usize)) };
        Ok(RingBuffer {
            control: base,
            data,
            data_size: size,
            memory,
            wake: None,
        })
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: the control page is at least MMAP_PAGE_SIZE bytes, 8-aligned (page or u64
        // aligned), and lives as long as self; the kernel accesses it atomically too.
        unsafe { &*self.control.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// `data_head`, loaded with acquire ordering (pairs with the kernel's smp_wmb before it
    /// publishes the head): the records before it are visible.
    pub fn head(&self) -> u64 {
        self.word(DATA_HEAD_OFFSET).load(Ordering::Acquire)
    }

    /// `data_tail` (only the reader writes it).
    pub fn tail(&self) -> u64 {
        self.word(DATA_TAIL_OFFSET).load(Ordering::Relaxed)
    }

    fn set_tail(&self, tail: u64) {
        // Release: our reads of the records happen before the kernel may reuse the space.
        self.word(DATA_TAIL_OFFSET).store(tail, Ordering::Release);
    }

    fn copy_out(&self, pos: u64, out: &mut [u8]) {
        let mask = self.data_size - 1;
        let start = (pos & mask) as usize;
        let first = out.len().min(self.data_size as usize - start);
        // SAFETY: start + first <= data_size and the rest wraps to the start of the area;
        // the bytes lie between tail and head, which the kernel does not touch.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data.as_ptr().add(start), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                self.data.as_ptr(),
                out.as_mut_ptr().add(first),
                out.len() - first,
            );
        }
    }

    /// Reads every complete record between `data_tail` and `data_head` (at most `max_bytes`
    /// of them), calls `f(header, body)` for each, then releases the space with one store of
    /// `data_tail`. A record that wraps the end of the area is copied into `scratch`.
    ///
    /// A header with a size below 8, or a record reaching past `data_head`, is corruption:
    /// the ring is resynchronised (tail = head, the rest is lost) and an error returned.
    pub fn drain(
        &mut self,
        scratch: &mut Vec<u8>,
        max_bytes: u64,
        mut f: impl FnMut(RecordHeader, &[u8]),
    ) -> Result<DrainStats, LiveError> {
        self.drain_while(scratch, max_bytes, |h, body| {
            f(h, body);
            true
        })
    }

    /// [`RingBuffer::drain`], stopping after the record for which `f` returns false (the
    /// records after it stay in the ring for the next drain).
    pub fn drain_while(
        &mut self,
        scratch: &mut Vec<u8>,
        max_bytes: u64,
        mut f: impl FnMut(RecordHeader, &[u8]) -> bool,
    ) -> Result<DrainStats, LiveError> {
        let head = self.head();
        let start = self.tail();
        let mut tail = start;
        let mut stats = DrainStats::default();
        let mask = self.data_size - 1;
        let result = loop {
            if tail >= head || tail - start >= max_bytes {
                break Ok(());
            }
            if head - tail < 8 {
                break Err(LiveError::RingCorrupt {
                    offset: tail,
                    what: "partial header before data_head",
                });
            }
            let mut hb = [0u8; 8];
            self.copy_out(tail, &mut hb);
            let header = RecordHeader::from_bytes(hb);
            let size = u64::from(header.size);
            if size < 8 || size % 8 != 0 {
                break Err(LiveError::RingCorrupt {
                    offset: tail,
                    what: "record size below 8 or not a multiple of 8",
                });
            }
            if tail + size > head {
                break Err(LiveError::RingCorrupt {
                    offset: tail,
                    what: "record reaches past data_head",
                });
            }
            let off = (tail & mask) as usize;
            let more = if off as u64 + size <= self.data_size {
                // SAFETY: the record lies inside the data area, between tail and head.
                let bytes = unsafe {
                    std::slice::from_raw_parts(self.data.as_ptr().add(off), size as usize)
                };
                f(header, &bytes[8..])
            } else {
                scratch.clear();
                scratch.resize(size as usize, 0);
                self.copy_out(tail, scratch);
                stats.wrapped += 1;
                f(header, &scratch[8..])
            };
            stats.records += 1;
            tail += size;
            if !more {
                break Ok(());
            }
        };
        let new_tail = if result.is_err() { head } else { tail };
        stats.bytes = new_tail - start;
        if new_tail != start {
            self.set_tail(new_tail);
        }
        result.map(|()| stats)
    }

    /// Heap rings only: sets both `data_head` and `data_tail` to `pos` (an empty ring whose
    /// next record starts at `pos & (size - 1)`, to place a record across the end).
    pub fn reset_position(&mut self, pos: u64) -> bool {
        if !matches!(self.memory, Memory::Heap(_)) {
            return false;
        }
        self.word(DATA_HEAD_OFFSET).store(pos, Ordering::Release);
        self.set_tail(pos);
        true
    }

    /// Heap rings only: appends whole records as the kernel does (bytes at
    /// `head & (size - 1)`, wrapping, then a release store of `data_head`), as many as fit
    /// in the free space. `records` must be a sequence of whole records. Returns how many
    /// bytes (whole records) were written; the caller offers the rest after a drain.
    pub fn write_as_kernel(&mut self, records: &[u8]) -> usize {
        if !matches!(self.memory, Memory::Heap(_)) {
            return 0;
        }
        let head = self.word(DATA_HEAD_OFFSET).load(Ordering::Relaxed);
        let free = self.data_size - (head - self.tail());
        let mut take = 0usize;
        while take + 8 <= records.len() {
            let size = u16::from_le_bytes([records[take + 6], records[take + 7]]) as usize;
            if size < 8 || take + size > records.len() || (take + size) as u64 > free {
                break;
            }
            take += size;
        }
        let mask = self.data_size - 1;
        let start = (head & mask) as usize;
        let first = take.min(self.data_size as usize - start);
        // SAFETY: heap memory owned by self; [start, start+first) and [0, take-first) are
        // inside the data area and free (between head and tail + size).
        unsafe {
            std::ptr::copy_nonoverlapping(records.as_ptr(), self.data.as_ptr().add(start), first);
            std::ptr::copy_nonoverlapping(
                records.as_ptr().add(first),
                self.data.as_ptr(),
                take - first,
            );
        }
        self.word(DATA_HEAD_OFFSET)
            .store(head + take as u64, Ordering::Release);
        take
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        if let Memory::Mmap { ptr, len } = self.memory {
            // SAFETY: the mapping was created by `map` with this length and is unmapped once.
            unsafe {
                libc::munmap(ptr.as_ptr().cast(), len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `words` u64 payload words: header {type, misc 0, size} then the words.
    fn record(ty: u32, words: &[u64]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&((8 + 8 * words.len()) as u16).to_le_bytes());
        for w in words {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v
    }

    fn collect(ring: &mut RingBuffer) -> (Vec<(u32, Vec<u8>)>, DrainStats) {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        let stats = ring
            .drain(&mut scratch, u64::MAX, |h, body| {
                out.push((h.record_type, body.to_vec()))
            })
            .unwrap();
        (out, stats)
    }

    #[test]
    fn control_page_offsets_are_the_abi() {
        let ring = RingBuffer::in_memory(2, 4096).unwrap();
        assert_eq!(ring.data_size(), 8192);
        assert_eq!((ring.head(), ring.tail()), (0, 0));
        // data_offset is read back from byte 1040 of the control page.
        assert_eq!(ring.word(DATA_OFFSET_OFFSET).load(Ordering::Relaxed), 4096);
    }

    #[test]
    fn wrapped_record_is_copied_out() {
        let mut ring = RingBuffer::in_memory(1, 4096).unwrap();
        // Next record starts 16 bytes before the end: a 32-byte record wraps by 16.
        assert!(ring.reset_position(4096 * 3 - 16));
        let mut bytes = record(9, &[0x1111, 0x2222, 0x3333]);
        bytes.extend(record(2, &[7, 8]));
        assert_eq!(ring.write_as_kernel(&bytes), 56);
        let (got, stats) = collect(&mut ring);
        assert_eq!(
            stats,
            DrainStats {
                records: 2,
                bytes: 56,
                wrapped: 1
            }
        );
        assert_eq!(got[0].0, 9);
        assert_eq!(got[0].1, record(9, &[0x1111, 0x2222, 0x3333])[8..].to_vec());
        assert_eq!(got[1], (2, record(2, &[7, 8])[8..].to_vec()));
        assert_eq!(ring.tail(), 4096 * 3 - 16 + 56);
    }

    #[test]
    fn full_ring_takes_only_what_fits() {
        let mut ring = RingBuffer::in_memory(1, 4096).unwrap();
        let one = record(9, &[0; 127]); // 1024 bytes
        let many: Vec<u8> = (0..5).flat_map(|_| one.clone()).collect();
        assert_eq!(ring.write_as_kernel(&many), 4096);
        assert_eq!(ring.write_as_kernel(&one), 0);
        let (got, _) = collect(&mut ring);
        assert_eq!(got.len(), 4);
        assert_eq!(ring.write_as_kernel(&one), 1024);
    }

    #[test]
    fn corrupt_size_resynchronises() {
        let mut ring = RingBuffer::in_memory(1, 4096).unwrap();
        let mut bytes = record(9, &[1]);
        bytes.extend_from_slice(&[9, 0, 0, 0, 0, 0, 4, 0]); // size 4 < 8
        ring.write_as_kernel(&bytes[..16]);
        // Publish the bad header by hand.
        ring.word(DATA_HEAD_OFFSET).store(16, Ordering::Release);
        // SAFETY: 8 bytes from `bytes[16..]` (24 long) into the in-memory ring's data area
        // (4096 bytes) at offset 16; the two buffers are distinct allocations.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes[16..].as_ptr(), ring.data.as_ptr().add(16), 8)
        };
        ring.word(DATA_HEAD_OFFSET).store(24, Ordering::Release);
        let mut scratch = Vec::new();
        let mut n = 0;
        let err = ring
            .drain(&mut scratch, u64::MAX, |_, _| n += 1)
            .unwrap_err();
        assert!(
            matches!(err, LiveError::RingCorrupt { offset: 16, .. }),
            "{err}"
        );
        assert_eq!(n, 1);
        assert_eq!(ring.tail(), 24);
    }

    #[test]
    fn rejects_non_power_of_two() {
        assert!(RingBuffer::in_memory(3, 4096).is_err());
        assert!(RingBuffer::in_memory(1, 1000).is_err());
    }
}
