//! Keys without types: where a forwarded sample's key is, and its RTPS key hash.
//!
//! The bridge forwards CDR without decoding it, but an instance (dispose, KEEP_LAST per
//! instance, Spindle's key hash) needs the key. A keyed topic's configuration lists the
//! types of the struct's **leading members that form its key**, in order (the common
//! layout: `struct Reading { @key string id; … }` is `key = ["string"]`). From that the
//! bridge reads the key out of an XCDR1 body (either byte order), re-encodes it
//! big-endian (RTPS 9.6.3.8) and hashes it exactly as Spindle does
//! ([`spindle_topics::cdr::key_hash_of`]). Leading members that are not part of the key
//! are listed too, prefixed `skip ` (Cyclone's `ddsperf` type `KeyedSeq { unsigned long
//! seq; @key unsigned long keyval; … }` is `key = ["skip uint32", "uint32"]`): they are
//! stepped over, and the key-only serialization (what an RTPS dispose carries) holds the
//! key members alone. Key members after a non-primitive, non-string member cannot be
//! named (said in docs/design.md).

use spindle_topics::cdr::key_hash_of;
use spindle_topics::KeyHash;

/// Most key members a layout may list.
pub const KEY_MEMBERS_MAX: usize = 32;

/// Longest bound accepted in `string<N>`.
pub const KEY_STRING_BOUND_MAX: usize = 1 << 16;

/// One key member's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMember {
    /// A primitive of this many bytes (1, 2, 4 or 8), aligned to its size (XCDR1).
    Primitive(usize),
    /// A string, unbounded (`None`) or `string<N>`.
    String(Option<usize>),
}

/// The key members of a keyed topic, in order, with the non-key members before them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    members: Vec<KeyMember>,
    /// `is_key[i]`: member `i` is part of the key (false: a `skip` member).
    is_key: Vec<bool>,
    /// Largest big-endian key serialization (None: unbounded).
    max_serialized_bytes: Option<usize>,
}

/// A key read out of a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractedKey {
    /// The RTPS / Spindle key hash.
    pub hash: KeyHash,
    /// How many leading bytes of the body the layout's members (key and skipped) cover.
    pub prefix_bytes: usize,
    /// The key members alone, serialized in the body's byte order from offset 0 (the
    /// key-only serialization an RTPS dispose carries); with no `skip` member, the body's
    /// first `prefix_bytes` bytes.
    pub key_only: Vec<u8>,
}

fn align(at: usize, to: usize) -> usize {
    at.div_ceil(to) * to
}

impl KeyLayout {
    /// Parses type names: `boolean`, `octet`, `char`, `int8`, `uint8`, `int16`, `uint16`,
    /// `short`, `unsigned short`, `int32`, `uint32`, `long`, `unsigned long`, `float`,
    /// `int64`, `uint64`, `long long`, `unsigned long long`, `double`, `string`,
    /// `string<N>`; each may be prefixed `skip ` (a leading member not in the key). At
    /// least one entry is a key member. The error says which entry is wrong.
    pub fn parse(names: &[String]) -> std::result::Result<Self, String> {
        if names.len() > KEY_MEMBERS_MAX {
            return Err(format!("at most {KEY_MEMBERS_MAX} key members"));
        }
        let mut members = Vec::with_capacity(names.len());
        let mut is_key = Vec::with_capacity(names.len());
        for (i, raw) in names.iter().enumerate() {
            let trimmed = raw.trim();
            let (name, key) = match trimmed.strip_prefix("skip ") {
                Some(rest) => (rest.trim(), false),
                None => (trimmed, true),
            };
            is_key.push(key);
            let m = match name {
                "boolean" | "bool" | "octet" | "char" | "int8" | "uint8" => KeyMember::Primitive(1),
                "int16" | "uint16" | "short" | "unsigned short" => KeyMember::Primitive(2),
                "int32" | "uint32" | "long" | "unsigned long" | "float" => KeyMember::Primitive(4),
                "int64" | "uint64" | "long long" | "unsigned long long" | "double" => {
                    KeyMember::Primitive(8)
                }
                "string" => KeyMember::String(None),
                s if s.starts_with("string<") && s.ends_with('>') => {
                    let n: usize = s["string<".len()..s.len() - 1]
                        .trim()
                        .parse()
                        .map_err(|_| format!("entry {i} {raw:?}: bad bound"))?;
                    if n == 0 || n > KEY_STRING_BOUND_MAX {
                        return Err(format!(
                            "entry {i} {raw:?}: bound must be 1..={KEY_STRING_BOUND_MAX}"
                        ));
                    }
                    KeyMember::String(Some(n))
                }
                _ => return Err(format!("entry {i} {raw:?}: not a key member type")),
            };
            members.push(m);
        }
        if !is_key.iter().any(|k| *k) {
            return Err("every entry is `skip`: name at least one key member".into());
        }
        let mut max = Some(0usize);
        for (m, _) in members.iter().zip(&is_key).filter(|(_, k)| **k) {
            max = match (max, m) {
                (Some(at), KeyMember::Primitive(n)) => Some(align(at, *n) + n),
                (Some(at), KeyMember::String(Some(n))) => Some(align(at, 4) + 4 + n + 1),
                _ => None,
            };
        }
        // Invariant: one key flag per member.
        assert!(is_key.len() == members.len());
        Ok(KeyLayout {
            members,
            is_key,
            max_serialized_bytes: max,
        })
    }

    /// The members the layout lists (key and skipped), in order.
    pub fn members(&self) -> &[KeyMember] {
        &self.members
    }

    /// True when the layout has `skip` members (the key-only serialization is then not a
    /// prefix of the body).
    pub fn has_skipped(&self) -> bool {
        self.is_key.iter().any(|k| !k)
    }

    /// Reads the key out of `body` (an XCDR1 body after the 4-byte encapsulation header,
    /// little-endian when `little`), or says what is wrong at which offset. Never panics.
    pub fn extract(&self, body: &[u8], little: bool) -> std::result::Result<ExtractedKey, String> {
        self.extract_from(body, little, true)
    }

    /// As [`KeyLayout::extract`], from a key-only serialization (the key members alone,
    /// as an RTPS dispose carries them): `skip` members are not in it.
    pub fn extract_key_only(
        &self,
        bytes: &[u8],
        little: bool,
    ) -> std::result::Result<ExtractedKey, String> {
        self.extract_from(bytes, little, false)
    }

    fn extract_from(
        &self,
        body: &[u8],
        little: bool,
        with_skipped: bool,
    ) -> std::result::Result<ExtractedKey, String> {
        let mut at = 0usize;
        let mut be = Vec::with_capacity(32);
        let mut own = Vec::with_capacity(32);
        let take = |at: usize, n: usize| -> std::result::Result<&[u8], String> {
            body.get(at..at.saturating_add(n)).ok_or_else(|| {
                format!(
                    "key member at offset {at} needs {n} bytes, the body has {}",
                    body.len()
                )
            })
        };
        for (m, key) in self.members.iter().zip(&self.is_key) {
            if !key && !with_skipped {
                continue;
            }
            match *m {
                KeyMember::Primitive(n) if !key => {
                    at = align(at, n);
                    take(at, n)?;
                    at += n;
                }
                KeyMember::Primitive(n) => {
                    at = align(at, n);
                    let bytes = take(at, n)?;
                    let pad = align(own.len(), n) - own.len();
                    own.extend(std::iter::repeat_n(0u8, pad));
                    own.extend_from_slice(bytes);
                    let pad = align(be.len(), n) - be.len();
                    be.extend(std::iter::repeat_n(0u8, pad));
                    if little {
                        be.extend(bytes.iter().rev());
                    } else {
                        be.extend_from_slice(bytes);
                    }
                    at += n;
                }
                KeyMember::String(bound) => {
                    at = align(at, 4);
                    let len_bytes: [u8; 4] = take(at, 4)?.try_into().map_err(|_| "short")?;
                    let len = if little {
                        u32::from_le_bytes(len_bytes)
                    } else {
                        u32::from_be_bytes(len_bytes)
                    } as usize;
                    if let Some(b) = bound {
                        // The length counts the terminating NUL.
                        if len > b + 1 {
                            return Err(format!(
                                "key string at offset {at} has {len} bytes, bound is {b}"
                            ));
                        }
                    }
                    let chars = take(at + 4, len)?;
                    if !key {
                        at += 4 + len;
                        continue;
                    }
                    let pad = align(own.len(), 4) - own.len();
                    own.extend(std::iter::repeat_n(0u8, pad));
                    own.extend_from_slice(&len_bytes);
                    own.extend_from_slice(chars);
                    let pad = align(be.len(), 4) - be.len();
                    be.extend(std::iter::repeat_n(0u8, pad));
                    be.extend_from_slice(&(len as u32).to_be_bytes());
                    be.extend_from_slice(chars);
                    at += 4 + len;
                }
            }
        }
        Ok(ExtractedKey {
            hash: key_hash_of(&be, self.max_serialized_bytes),
            prefix_bytes: at,
            key_only: own,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spindle_topics::{Endianness, KeyedString, TopicType};

    fn layout(names: &[&str]) -> KeyLayout {
        KeyLayout::parse(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn the_hash_of_a_string_key_is_spindles_in_both_byte_orders() {
        let l = layout(&["string"]);
        for key in ["", "a", "instance-0042", "a key longer than sixteen bytes"] {
            let v = KeyedString {
                key: key.into(),
                value: "payload".into(),
            };
            let want = v.key_hash().unwrap();
            for (e, little) in [(Endianness::Little, true), (Endianness::Big, false)] {
                let bytes = v.encode(e).unwrap();
                let got = l.extract(&bytes[4..], little).unwrap();
                assert_eq!(got.hash, want, "key {key:?} little {little}");
                assert_eq!(got.prefix_bytes, 4 + key.len() + 1);
            }
        }
    }

    #[test]
    fn small_fixed_keys_are_the_big_endian_bytes_padded() {
        let l = layout(&["octet", "int32", "int16"]);
        // body LE: octet 7, pad 3, int32 0x01020304, int16 0x0506
        let body = [7, 0, 0, 0, 4, 3, 2, 1, 6, 5, 0xAA];
        let k = l.extract(&body, true).unwrap();
        let mut want = [0u8; 16];
        want[..10].copy_from_slice(&[7, 0, 0, 0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(k.hash.0, want);
        assert_eq!(k.prefix_bytes, 10);
    }

    #[test]
    fn skipped_leading_members_are_stepped_over_and_left_out_of_the_key() {
        // ddsperf's KeyedSeq: uint32 seq; @key uint32 keyval; sequence<octet> baggage.
        let l = layout(&["skip uint32", "uint32"]);
        assert!(l.has_skipped());
        let body = [9, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 3, 0, 0, 0, 1, 2, 3];
        let k = l.extract(&body, true).unwrap();
        let mut want = [0u8; 16];
        want[..4].copy_from_slice(&[0x44, 0x33, 0x22, 0x11]);
        assert_eq!(k.hash.0, want);
        assert_eq!(k.prefix_bytes, 8);
        assert_eq!(k.key_only, vec![0x11, 0x22, 0x33, 0x44]);
        // The same key from its key-only serialization (an RTPS dispose).
        let again = l.extract_key_only(&k.key_only, true).unwrap();
        assert_eq!((again.hash, again.key_only), (k.hash, k.key_only.clone()));
        // A skipped string, then a key octet and int64 (aligned in the key-only bytes).
        let l = layout(&["skip string", "octet", "int64"]);
        // string "a" (length 2 with its NUL) at 0..6, the octet at 6, the int64 at 8.
        let body = [2, 0, 0, 0, b'a', 0, 7, 0, 8, 0, 0, 0, 0, 0, 0, 0];
        let k = l.extract(&body, true).unwrap();
        assert_eq!(
            k.key_only,
            vec![7, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(l.extract_key_only(&k.key_only, true).unwrap().hash, k.hash);
        // Without skips the key-only bytes are the body's prefix.
        let l = layout(&["int32"]);
        let k = l.extract(&[1, 2, 3, 4, 5], true).unwrap();
        assert_eq!(k.key_only, vec![1, 2, 3, 4]);
        assert!(KeyLayout::parse(&["skip int32".into()]).is_err());
    }

    #[test]
    fn short_or_lying_bodies_are_errors_not_panics() {
        let l = layout(&["string", "int64"]);
        assert!(l.extract(&[], true).is_err());
        assert!(l.extract(&[0xff, 0xff, 0xff, 0xff, b'a'], true).is_err());
        assert!(l.extract(&[2, 0, 0, 0, b'a', 0, 0, 0, 1], true).is_err());
        let bounded = layout(&["string<2>"]);
        assert!(bounded.extract(&[9, 0, 0, 0, b'a'], true).is_err());
    }

    #[test]
    fn bad_layouts_name_the_entry() {
        let e = KeyLayout::parse(&["int32".into(), "quaternion".into()]).unwrap_err();
        assert!(e.contains("entry 1") && e.contains("quaternion"), "{e}");
        let e = KeyLayout::parse(&["string<0>".into()]).unwrap_err();
        assert!(e.contains("bound"), "{e}");
    }
}
