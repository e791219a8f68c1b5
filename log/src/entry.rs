//! The on-disk form of one entry: a fixed header, the payload, zero padding to 8 bytes.
//! Pure functions over byte slices; no file is touched here.
//!
//! ```text
//! offset  size  field
//!      0     4  magic            ENTRY_MAGIC, little-endian
//!      4     4  crc              CRC-32 (IEEE) of bytes 8..HEADER_BYTES and of the payload
//!      8     4  payload_len      bytes of payload (at most PAYLOAD_BYTES_MAX)
//!     12     4  reserved         zero
//!     16     8  view_id          version, major
//!     24     8  order_index      version, minor (the subgroup's global delivery index)
//!     32     8  writer           the node that sent the message
//!     40     8  timestamp_us     the sender's clock, microseconds since the Unix epoch
//!     48     8  synced_end       the segment offset known durable when this was appended
//!     56     …  payload, then zeros up to the next multiple of ENTRY_ALIGN_BYTES
//! ```
//!
//! `synced_end` is how [`crate::Log::open`] tells a torn tail (bytes that were never
//! synced) from corruption of bytes that were: an entry vouches that every byte before its
//! `synced_end` had been made durable before it was written.

use std::fmt;

/// Bytes of an entry's header.
pub const HEADER_BYTES: usize = 56;
/// Entries start at multiples of this in a segment.
pub const ENTRY_ALIGN_BYTES: usize = 8;
/// The largest payload one entry may carry (a length beyond it reads as corruption).
pub const PAYLOAD_BYTES_MAX: usize = 256 << 20;
/// The first four bytes of every entry ("SPLE", little-endian).
pub const ENTRY_MAGIC: u32 = u32::from_le_bytes(*b"SPLE");

const _: () = assert!(HEADER_BYTES % ENTRY_ALIGN_BYTES == 0);
const _: () = assert!(PAYLOAD_BYTES_MAX <= u32::MAX as usize);

/// The version of an entry: `(view id, order index)`, ordered lexicographically. Entries
/// of a log have strictly increasing versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The view in which the message was delivered.
    pub view_id: u64,
    /// Its index in the subgroup's total order of that view.
    pub order_index: u64,
}

impl Version {
    /// The version `(view_id, order_index)`.
    pub const fn new(view_id: u64, order_index: u64) -> Self {
        Version {
            view_id,
            order_index,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.view_id, self.order_index)
    }
}

/// What the log records about an entry besides its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryMeta {
    /// The entry's version.
    pub version: Version,
    /// The node id of the message's sender.
    pub writer: u64,
    /// The sender's clock when it wrote the message, microseconds since the Unix epoch
    /// (the DCPS source timestamp; not a hybrid logical clock).
    pub timestamp_us: u64,
}

/// Bytes the entry with `payload_len` payload bytes takes in a segment.
pub const fn entry_bytes(payload_len: usize) -> usize {
    (HEADER_BYTES + payload_len).div_ceil(ENTRY_ALIGN_BYTES) * ENTRY_ALIGN_BYTES
}

/// Appends the encoded entry to `out`.
pub(crate) fn encode(meta: &EntryMeta, payload: &[u8], synced_end: u64, out: &mut Vec<u8>) {
    assert!(payload.len() <= PAYLOAD_BYTES_MAX); // checked by the caller with an error
    let start = out.len();
    out.extend_from_slice(&ENTRY_MAGIC.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // crc, filled below
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for word in [
        meta.version.view_id,
        meta.version.order_index,
        meta.writer,
        meta.timestamp_us,
        synced_end,
    ] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.extend_from_slice(payload);
    out.resize(start + entry_bytes(payload.len()), 0);
    let crc = checksum(&out[start + 8..start + HEADER_BYTES], payload);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn checksum(header_tail: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header_tail);
    h.update(payload);
    h.finalize()
}

/// Why the bytes at an offset are not a valid entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The segment ends inside the entry (header or payload).
    Truncated,
    /// The first four bytes are not [`ENTRY_MAGIC`].
    BadMagic,
    /// The length field exceeds [`PAYLOAD_BYTES_MAX`].
    BadLength,
    /// The checksum does not match the header and payload.
    BadChecksum,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invalid::Truncated => "the file ends inside an entry",
            Invalid::BadMagic => "no entry magic",
            Invalid::BadLength => "entry length out of range",
            Invalid::BadChecksum => "checksum mismatch",
        })
    }
}

/// A valid entry found in a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub meta: EntryMeta,
    pub synced_end: u64,
    pub crc: u32,
    pub payload_len: usize,
    /// Bytes the entry takes, padding included.
    pub total_bytes: usize,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// Decodes the entry that starts at the beginning of `bytes` (which may run on past it).
pub(crate) fn decode(bytes: &[u8]) -> Result<Decoded, Invalid> {
    if bytes.len() < 4 {
        return Err(Invalid::Truncated);
    }
    if u32_at(bytes, 0) != ENTRY_MAGIC {
        return Err(Invalid::BadMagic);
    }
    if bytes.len() < HEADER_BYTES {
        return Err(Invalid::Truncated);
    }
    let payload_len = u32_at(bytes, 8) as usize;
    if payload_len > PAYLOAD_BYTES_MAX {
        return Err(Invalid::BadLength);
    }
    let total_bytes = entry_bytes(payload_len);
    if bytes.len() < total_bytes {
        return Err(Invalid::Truncated);
    }
    let payload = &bytes[HEADER_BYTES..HEADER_BYTES + payload_len];
    let crc = u32_at(bytes, 4);
    if checksum(&bytes[8..HEADER_BYTES], payload) != crc {
        return Err(Invalid::BadChecksum);
    }
    Ok(Decoded {
        meta: EntryMeta {
            version: Version::new(u64_at(bytes, 16), u64_at(bytes, 24)),
            writer: u64_at(bytes, 32),
            timestamp_us: u64_at(bytes, 40),
        },
        synced_end: u64_at(bytes, 48),
        crc,
        payload_len,
        total_bytes,
    })
}

/// The payload of an entry that [`decode`] accepted.
pub(crate) fn payload_of(bytes: &[u8], d: &Decoded) -> Vec<u8> {
    bytes[HEADER_BYTES..HEADER_BYTES + d.payload_len].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_decode_and_every_flip_is_caught() {
        let meta = EntryMeta {
            version: Version::new(3, 17),
            writer: 2,
            timestamp_us: 1_700_000_000_000_000,
        };
        let mut b = Vec::new();
        encode(&meta, b"abc", 64, &mut b);
        assert_eq!(b.len(), entry_bytes(3));
        let d = decode(&b).unwrap();
        assert_eq!((d.meta, d.synced_end, d.payload_len), (meta, 64, 3));
        assert_eq!(payload_of(&b, &d), b"abc");
        // Every single-bit flip in the covered bytes is detected (a CRC's guarantee).
        for byte in 0..HEADER_BYTES + 3 {
            for bit in 0..8 {
                let mut c = b.clone();
                c[byte] ^= 1 << bit;
                assert!(
                    decode(&c).is_err(),
                    "flip at byte {byte} bit {bit} undetected"
                );
            }
        }
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "cut at {cut} accepted");
        }
    }
}
