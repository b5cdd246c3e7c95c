//! Page buffers and the header every page starts with.
//!
//! Layout of the 24-byte page header (little endian):
//!
//! | bytes  | field                                                                  |
//! |--------|------------------------------------------------------------------------|
//! | 0..8   | xxh3-64 checksum of bytes 8..page_size, seeded with the page id         |
//! | 8      | page type (`PageType`)                                                 |
//! | 9..16  | reserved for the page's owner (zero unless the owner documents a use)  |
//! | 16..24 | epoch: the checkpoint epoch in which this page image was allocated      |
//!
//! Seeding the checksum with the page id makes a page written to the wrong place fail verification.
//! The epoch drives copy-on-write: a page whose epoch is older than the page file's current epoch belongs to
//! the last checkpoint and must not be modified in place.

use bytemuck::{Pod, Zeroable};
use std::ops::{Deref, DerefMut};

/// Index of a page in a page file (byte offset = id × page size).
pub type PageId = u64;

/// Length of the common page header.
pub const PAGE_HEADER_LEN: usize = 24;
/// Smallest page size a page file accepts.
pub const MIN_PAGE_SIZE: usize = 4096;
/// Largest page size a page file accepts (4 MiB). An index format may accept less (the B+-tree takes pages
/// up to 64 KiB).
pub const MAX_PAGE_SIZE: usize = 4 << 20;

/// What a page holds.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageType {
    /// One of the two meta slots of a page file (pages 0 and 1).
    Meta = 1,
    /// A page of the persisted free list.
    FreeList = 2,
    /// A B+-tree leaf.
    BTreeLeaf = 3,
    /// A B+-tree inner node.
    BTreeInner = 4,
    /// A page of a large value stored out of line.
    Overflow = 5,
    /// A Bε-tree leaf.
    BeLeaf = 6,
    /// A Bε-tree inner node (pivots, children and a message buffer).
    BeInner = 7,
}

impl PageType {
    pub fn from_u8(v: u8) -> Option<PageType> {
        Some(match v {
            1 => PageType::Meta,
            2 => PageType::FreeList,
            3 => PageType::BTreeLeaf,
            4 => PageType::BTreeInner,
            5 => PageType::Overflow,
            6 => PageType::BeLeaf,
            7 => PageType::BeInner,
            _ => return None,
        })
    }
}

/// Checks that `size` is a valid page size: a power of two from `MIN_PAGE_SIZE` to `MAX_PAGE_SIZE`.
pub fn validate_page_size(size: usize) -> crate::Result<()> {
    if !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&size) || !size.is_power_of_two() {
        return Err(crate::Error::invalid(format!(
            "page size {size} must be a power of two from {MIN_PAGE_SIZE} to {MAX_PAGE_SIZE}"
        )));
    }
    Ok(())
}

#[repr(C, align(4096))]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Block([u8; 4096]);

/// A zero-initialised page-sized buffer aligned to 4096 bytes (so it can be used for O_DIRECT I/O).
#[derive(Clone)]
pub struct PageBuf {
    blocks: Box<[Block]>,
}

impl PageBuf {
    /// A zeroed buffer of `size` bytes; `size` must be a multiple of 4096.
    pub fn new(size: usize) -> Self {
        assert!(
            size > 0 && size.is_multiple_of(4096),
            "page buffers are multiples of 4096 bytes"
        );
        PageBuf {
            blocks: vec![Block::zeroed(); size / 4096].into_boxed_slice(),
        }
    }
    /// Sets every byte to zero.
    pub fn clear(&mut self) {
        self.fill(0);
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.blocks)
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.blocks)
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageBuf({} bytes, type {})", self.len(), self[8])
    }
}

/// The page type byte.
#[inline]
pub fn page_type(page: &[u8]) -> u8 {
    page[8]
}

/// Sets the page type byte.
#[inline]
pub fn set_page_type(page: &mut [u8], t: PageType) {
    page[8] = t as u8;
}

/// The epoch in which this page image was allocated.
#[inline]
pub fn page_epoch(page: &[u8]) -> u64 {
    u64::from_le_bytes(page[16..24].try_into().expect("8 bytes"))
}

/// Sets the page's epoch.
#[inline]
pub fn set_page_epoch(page: &mut [u8], epoch: u64) {
    page[16..24].copy_from_slice(&epoch.to_le_bytes());
}

/// Computes the checksum of a page image as it should be stored for page `id`.
#[inline]
pub fn page_checksum(page: &[u8], id: PageId) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(&page[8..], id)
}

/// Writes the checksum into bytes 0..8.
#[inline]
pub fn stamp_checksum(page: &mut [u8], id: PageId) {
    let sum = page_checksum(page, id);
    page[0..8].copy_from_slice(&sum.to_le_bytes());
}

/// True if the stored checksum matches the page's contents for page `id`.
#[inline]
pub fn verify_checksum(page: &[u8], id: PageId) -> bool {
    let stored = u64::from_le_bytes(page[0..8].try_into().expect("8 bytes"));
    stored == page_checksum(page, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_buf_is_aligned_and_zeroed() {
        let b = PageBuf::new(16384);
        assert_eq!(b.len(), 16384);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.iter().all(|&x| x == 0));
    }

    #[test]
    fn checksum_detects_flips_and_misplacement() {
        let mut b = PageBuf::new(4096);
        set_page_type(&mut b, PageType::BTreeLeaf);
        set_page_epoch(&mut b, 7);
        b[100] = 42;
        stamp_checksum(&mut b, 5);
        assert!(verify_checksum(&b, 5));
        assert!(
            !verify_checksum(&b, 6),
            "a page read from another position must fail"
        );
        b[4000] ^= 1;
        assert!(!verify_checksum(&b, 5));
        assert_eq!(page_epoch(&b), 7);
        assert_eq!(PageType::from_u8(page_type(&b)), Some(PageType::BTreeLeaf));
    }

    #[test]
    fn page_sizes_are_checked() {
        for size in [4096, 65536, 131072, 1 << 20, 4 << 20] {
            assert!(validate_page_size(size).is_ok(), "{size}");
        }
        for size in [0, 1, 2048, 12288, (1 << 20) + 4096, 8 << 20, usize::MAX] {
            assert!(
                matches!(
                    validate_page_size(size),
                    Err(crate::Error::InvalidArgument(_))
                ),
                "{size}"
            );
        }
    }

    #[test]
    fn large_page_bufs_are_aligned_and_checksummed_end_to_end() {
        for size in [1 << 20, MAX_PAGE_SIZE] {
            let mut b = PageBuf::new(size);
            assert_eq!(b.len(), size);
            assert_eq!(b.as_ptr() as usize % 4096, 0);
            set_page_type(&mut b, PageType::BeLeaf);
            b[size - 1] = 9;
            stamp_checksum(&mut b, 3);
            assert!(verify_checksum(&b, 3));
            // The last byte of the page is covered by the checksum.
            b[size - 1] ^= 1;
            assert!(!verify_checksum(&b, 3));
        }
    }
}
