//! Samples as CDR bytes, for topics whose type is known only at run time.
//!
//! A bridge to another DDS, a spy tool or a dynamic-type front end moves samples it does
//! not decode. [`CdrSample`] is a [`TopicType`] that carries one sample's XCDR1 encoding
//! (encapsulation header included) and its instance's [`KeyHash`] as they are: writing it
//! copies the bytes into the message, reading it copies them out, nothing is decoded. The
//! DDS type name of such a topic is given when the topic is created (its
//! [`TopicType::TYPE_NAME_AT_RUNTIME`] is true), so one Rust type serves every DDS type.
//!
//! ```
//! use spindle_topics::{CdrSample, Endianness, KeyHash, KeyedString, TopicType};
//!
//! let typed = KeyedString { key: "AF123".into(), value: "climb".into() };
//! let raw = CdrSample::new(typed.encode(Endianness::Little)?, typed.key_hash()?)?;
//! // The same bytes on the wire as the typed sample's:
//! assert_eq!(raw.encode(Endianness::Little)?, typed.encode(Endianness::Little)?);
//! // and a typed reader decodes what a raw writer wrote.
//! assert_eq!(KeyedString::decode(raw.bytes())?, typed);
//! // Bytes that are not an XCDR1 encapsulation are refused when the sample is made.
//! assert!(CdrSample::new(vec![0, 7, 0, 0], KeyHash::default()).is_err());
//! # Ok::<(), spindle_topics::Error>(())
//! ```

use crate::{Endianness, Error, KeyHash, Result, TopicType, ENCAPSULATION_HEADER_LEN};

/// One sample of any type as its XCDR1 encoding and key hash (see the [module](self) docs).
///
/// The bytes start with the 4-byte encapsulation header, CDR_BE (`00 00`) or CDR_LE
/// (`00 01`); [`CdrSample::new`] checks it. The key hash is the RTPS key hash of the
/// sample's instance (all zeros on a keyless topic); the middleware takes the instance from
/// it and never looks into the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CdrSample {
    bytes: Vec<u8>,
    key_hash: KeyHash,
}

impl CdrSample {
    /// A sample from its encoding (header included) and its instance's key hash;
    /// [`Error::BadEncapsulation`] when the bytes do not start with a CDR_BE or CDR_LE
    /// header, [`Error::Decode`] when they are shorter than one.
    pub fn new(bytes: Vec<u8>, key_hash: KeyHash) -> Result<Self> {
        check_encapsulation(&bytes)?;
        Ok(Self { bytes, key_hash })
    }

    /// The encoding, encapsulation header included.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The instance's key hash (all zeros on a keyless topic).
    pub fn key_hash_value(&self) -> KeyHash {
        self.key_hash
    }

    /// The byte order the encapsulation header names.
    pub fn endianness(&self) -> Endianness {
        if self.bytes[1] == 0 {
            Endianness::Big
        } else {
            Endianness::Little
        }
    }

    /// Takes the encoding out.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Checks that `bytes` start with an XCDR1 plain-CDR encapsulation header.
fn check_encapsulation(bytes: &[u8]) -> Result<()> {
    match bytes {
        [0, 0 | 1, _, _, ..] => Ok(()),
        [a, b, ..] if (*a, *b) != (0, 0) && (*a, *b) != (0, 1) => {
            Err(Error::BadEncapsulation { found: [*a, *b] })
        }
        _ => Err(Error::Decode {
            type_name: CdrSample::TYPE_NAME,
            offset: bytes.len(),
            detail: format!(
                "{} bytes, shorter than the {ENCAPSULATION_HEADER_LEN}-byte encapsulation header",
                bytes.len()
            ),
        }),
    }
}

impl TopicType for CdrSample {
    /// A placeholder: the topic's DDS type name is the one given at its creation.
    const TYPE_NAME: &'static str = "Spindle::CdrSample";
    const TYPE_NAME_AT_RUNTIME: bool = true;
    /// True: the instance is the carried key hash (all zeros for a keyless topic, which
    /// is the one instance a keyless type has).
    const HAS_KEY: bool = true;
    const MAX_SERIALIZED_SIZE: Option<usize> = None;
    const KEY_MAX_SERIALIZED_SIZE: Option<usize> = None;

    /// Copies the bytes as they are, in the byte order they were encoded in:
    /// `endianness` is ignored (the header says which one the bytes use).
    fn encode_into(&self, _endianness: Endianness, buf: &mut [u8]) -> Result<usize> {
        let n = self.bytes.len();
        let available = buf.len();
        let dst = buf.get_mut(..n).ok_or(Error::BufferTooSmall {
            needed: n,
            available,
        })?;
        dst.copy_from_slice(&self.bytes);
        Ok(n)
    }

    /// The bytes with an all-zero key hash: a reader's samples get theirs from
    /// [`TopicType::decode_with_key_hash`].
    fn decode(bytes: &[u8]) -> Result<Self> {
        Self::decode_with_key_hash(bytes, &KeyHash::default())
    }

    fn decode_with_key_hash(bytes: &[u8], key_hash: &KeyHash) -> Result<Self> {
        Self::new(bytes.to_vec(), *key_hash)
    }

    // The bytes into the sample's own buffer: no allocation once it has grown.
    fn decode_in_place(&mut self, bytes: &[u8], key_hash: &KeyHash) -> Result<()> {
        check_encapsulation(bytes)?;
        self.bytes.clear();
        self.bytes.extend_from_slice(bytes);
        self.key_hash = *key_hash;
        Ok(())
    }

    /// The serialized key is not known without the type: always an error. The instance
    /// comes from [`CdrSample::key_hash_value`], which [`TopicType::key_hash`] returns.
    fn encode_key_be(&self, _out: &mut Vec<u8>) -> Result<()> {
        Err(Error::Encode {
            type_name: Self::TYPE_NAME,
            detail: "a raw CDR sample carries its key hash, not its serialized key".into(),
        })
    }

    fn key_hash(&self) -> Result<KeyHash> {
        Ok(self.key_hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::examples::Sample;

    #[test]
    fn short_or_foreign_encodings_are_refused_with_what_was_found() {
        assert!(matches!(
            CdrSample::new(vec![], KeyHash::default()),
            Err(Error::Decode { offset: 0, .. })
        ));
        // XCDR2 (00 07) is not XCDR1: refused, not carried to readers that cannot decode it.
        assert_eq!(
            CdrSample::new(vec![0, 7, 0, 0, 1], KeyHash::default()),
            Err(Error::BadEncapsulation { found: [0, 7] })
        );
        assert!(matches!(
            CdrSample::decode(&[0, 1]),
            Err(Error::Decode { offset: 2, .. })
        ));
    }

    #[test]
    fn a_raw_sample_is_the_typed_sample_byte_for_byte_in_either_byte_order() {
        let typed = Sample::default();
        for e in [Endianness::Little, Endianness::Big] {
            let bytes = typed.encode(e).unwrap();
            let raw = CdrSample::new(bytes.clone(), typed.key_hash().unwrap()).unwrap();
            assert_eq!(raw.endianness(), e);
            // The writer's byte order is kept, whatever the middleware asks for.
            assert_eq!(raw.encode(Endianness::Little).unwrap(), bytes);
            assert_eq!(Sample::decode(raw.bytes()).unwrap(), typed);
            let back = CdrSample::decode_with_key_hash(&bytes, &raw.key_hash_value()).unwrap();
            assert_eq!(back, raw);
            let mut small = vec![0u8; bytes.len() - 1];
            assert_eq!(
                raw.encode_into(e, &mut small),
                Err(Error::BufferTooSmall {
                    needed: bytes.len(),
                    available: bytes.len() - 1
                })
            );
        }
    }
}
