//! # spindle-topics — typed topics
//!
//! Every DDS data type implements [`TopicType`]: its registered type name, an XCDR1 plain
//! CDR encoding (with the 4-byte encapsulation header, byte-identical to what RTPS vendors
//! put on the wire), decoding from a borrowed slice that never panics, key extraction and
//! the 16-byte DDS-RTPS key hash.
//!
//! Types are normally generated from IDL by `spindle-idl`; the generated code is short
//! because it leans on the helpers in [`cdr`]. This tutorial writes one by hand — the
//! built-in [`KeyedString`] is exactly this:
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use spindle_topics::{cdr, Endianness, Result, TopicType};
//!
//! // IDL: struct Greeting { @key string key; string value; };
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! struct Greeting {
//!     key: String,
//!     value: String,
//! }
//!
//! impl TopicType for Greeting {
//!     const TYPE_NAME: &'static str = "Greeting";
//!     const HAS_KEY: bool = true;
//!     const MAX_SERIALIZED_SIZE: Option<usize> = None; // unbounded strings
//!     const KEY_MAX_SERIALIZED_SIZE: Option<usize> = None;
//!
//!     fn encode_into(&self, endianness: Endianness, buf: &mut [u8]) -> Result<usize> {
//!         cdr::encode_into(self, endianness, buf)
//!     }
//!     fn decode(bytes: &[u8]) -> Result<Self> {
//!         cdr::decode(bytes)
//!     }
//!     fn encode_key_be(&self, out: &mut Vec<u8>) -> Result<()> {
//!         // The key members, in declaration order, as a tuple.
//!         cdr::encode_key_be(&(&self.key,), out)
//!     }
//! }
//!
//! # fn main() -> Result<()> {
//! let hello = Greeting { key: "hi".into(), value: "world".into() };
//!
//! // Encode into a caller's buffer (e.g. a loaned slot) ...
//! let mut slot = [0u8; 64];
//! let n = hello.encode_into(Endianness::Little, &mut slot)?;
//! assert_eq!(&slot[..4], &[0x00, 0x01, 0x00, 0x00]); // CDR_LE encapsulation header
//! // ... key: u32 length 3 (LE), "hi\0", pad to 4, then value: length 6, "world\0".
//! assert_eq!(n, 4 + 4 + 3 + 1 + 4 + 6);
//!
//! // ... and decode it back from a borrowed slice.
//! assert_eq!(Greeting::decode(&slot[..n])?, hello);
//!
//! // A too-small buffer is an error that says how much is needed, never a panic.
//! let err = hello.encode_into(Endianness::Big, &mut slot[..8]).unwrap_err();
//! assert!(matches!(err, spindle_topics::Error::BufferTooSmall { needed: 22, available: 8 }));
//!
//! // Bad bytes are an error too.
//! assert!(Greeting::decode(&[0x00, 0x01, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff]).is_err());
//!
//! // The key hash: the key is unbounded, so it is the MD5 of the big-endian CDR key.
//! let hash = hello.key_hash()?;
//! assert_eq!(hash, Greeting { key: "hi".into(), value: "other".into() }.key_hash()?);
//! # Ok(())
//! # }
//! ```
//!
//! ## The avionics model
//!
//! `topics/idl/avionics.idl` is compiled at build time by `build.rs` with `spindle-idl`
//! into [`avionics`]; its types are used like any other:
//!
//! ```
//! use spindle_topics::avionics::{AirData, AltitudeReference, HealthHeartbeat, HealthStatus};
//! use spindle_topics::{Endianness, TopicType};
//!
//! let air = AirData {
//!     aircraft_id: 0x4B1805,
//!     timestamp_ns: 1_700_000_000_000_000_000,
//!     indicated_airspeed_mps: 128.5,
//!     true_airspeed_mps: 231.25,
//!     mach: 0.78,
//!     pressure_altitude_m: 10668.0,
//!     vertical_speed_mps: -2.5,
//!     static_air_temperature_k: 218.15,
//!     altitude_reference: AltitudeReference::Geometric,
//! };
//! assert_eq!(AirData::TYPE_NAME, "Avionics::AirData");
//! assert_eq!(AirData::MAX_SERIALIZED_SIZE, Some(4 + 44)); // every member is bounded
//! let bytes = air.encode(Endianness::Little).unwrap();
//! assert_eq!(AirData::decode(&bytes).unwrap(), air);
//! // The key (aircraft_id, 4 bytes) fits in 16 bytes: the key hash is the key itself.
//! assert_eq!(&air.key_hash().unwrap().0[..4], &[0x00, 0x4B, 0x18, 0x05]);
//!
//! // A bounded string longer than its IDL bound is refused.
//! let hb = HealthHeartbeat {
//!     aircraft_id: 1,
//!     subsystem: "a subsystem name longer than 16".into(),
//!     sequence_number: 0,
//!     status: HealthStatus::Nominal,
//!     severity_code: 'I',
//!     temperature_c: 20,
//!     detail: String::new(),
//!     fault_codes: vec![],
//! };
//! assert!(matches!(
//!     hb.encode(Endianness::Big),
//!     Err(spindle_topics::Error::BoundExceeded { max: 16, .. })
//! ));
//! ```
//!
//! ## How IDL maps to Rust (what `spindle-idl` generates)
//!
//! | IDL | Rust | notes |
//! |---|---|---|
//! | `boolean`, `octet`, `short` … `unsigned long long`, `float`, `double` | `bool`, `u8`, `i16` … `u64`, `f32`, `f64` | plain serde |
//! | `char` | `char` | one byte; only ASCII (U+0000..=U+007F) encodes, others give an error |
//! | `wchar` | [`cdr::WChar`] | two bytes (UTF-16 code unit, BMP only), as Cyclone DDS |
//! | `wstring`, `wstring<N>` | [`cdr::WString`] | u32 length in bytes, then UTF-16 code units, no terminator (as Cyclone DDS's C library; the bound counts code units) |
//! | `string`, `string<N>` | `String` | bound checked by [`cdr::check_len`] on encode and decode |
//! | `sequence<T>`, `sequence<T, N>` | `Vec<T>` | bound checked like strings |
//! | `sequence<octet>` | `Vec<u8>` with `#[serde(with = "spindle_topics::cdr::octets")]` | bulk copy |
//! | `T a[N]` (N ≤ 32), multi-dimensional | `[T; N]`, `[[T; M]; N]` | plain serde |
//! | `T a[N]` (N > 32) | `[T; N]` with `#[serde(with = "spindle_topics::cdr::array")]` | |
//! | `enum` | Rust enum implementing [`cdr::IdlEnum`], serde via [`cdr::serialize_enum`] / [`cdr::deserialize_enum`] | u32 on the wire, explicit values kept |
//! | `union` | Rust enum implementing [`cdr::IdlUnion`], serde via [`cdr::serialize_union`] / [`cdr::deserialize_union`] | typed discriminator |
//! | `@optional T m` | `Option<T>` with `serialize_with`/`deserialize_with` = [`cdr::optional`]`::{serialize, deserialize}::<_, _, ID>` | XCDR1 parameter header, member id = position or `@id` |
//! | struct inheritance | base members first (a `base` field or flattened members) | |
//!
//! The hand-written examples in [`builtin`] (including [`builtin::examples`], an enum and a
//! union) show the exact shape of generated code:
//!
//! * `encode_into`: `self.check_bounds()?; cdr::encode_into(self, endianness, buf)`;
//! * `decode`: `let v: Self = cdr::decode(bytes)?; v.check_bounds()?; Ok(v)`;
//! * `encode_key_be`: `cdr::encode_key_be(&(&self.k1, &self.k2), out)` with the key
//!   members in declaration order; a key member of struct type contributes all its members
//!   when that struct has no keys, else just its key members (list them in the tuple);
//! * `MAX_SERIALIZED_SIZE` / `KEY_MAX_SERIALIZED_SIZE`: `None` when anything is unbounded,
//!   else computed in `const` context with [`cdr::MaxSize`] (each type gets a
//!   `const fn max_size_from(s: MaxSize) -> MaxSize`);
//! * `TYPE_HASH`: `Some` of the structural hash of the IDL definition (hand-written types
//!   keep the default `None`: matched by type name alone).
//!
//! The key hash follows RTPS 9.6.3.8: the key in XCDR1 big-endian (8-byte alignment).
//! (DDS-XTypes 1.3 describes it with XCDR2, 4-byte alignment; the two differ only for keys
//! with 8-byte members after a shorter one.)
#![deny(missing_docs)]

// Generated code names this crate by its path, as any other crate using it would.
extern crate self as spindle_topics;

pub mod builtin;
pub mod cdr;
mod error;
pub mod raw;

mod generated {
    //! `idl/avionics.idl`, compiled by `build.rs` with `spindle-idl`.
    include!(concat!(env!("OUT_DIR"), "/avionics.rs"));
}
/// The avionics data model of `topics/idl/avionics.idl` (module `Avionics`), generated at
/// build time: air data, attitude, navigation position, flight plan with waypoints, track
/// reports and health heartbeats, keyed by aircraft, track or subsystem.
pub use generated::avionics;

pub use builtin::{KeyedString, Sequence};
pub use error::{Error, Result};
pub use raw::CdrSample;

thread_local! {
    /// The serialized key of [`TopicType::key_hash`], kept per thread between calls.
    static KEY_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// CDR byte order of an encapsulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Endianness {
    /// Little endian: encapsulation identifier CDR_LE (`00 01`).
    #[default]
    Little,
    /// Big endian (network order): encapsulation identifier CDR_BE (`00 00`).
    Big,
}

/// The 16-byte DDS-RTPS key hash (RTPS 9.6.3.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct KeyHash(pub [u8; 16]);

impl std::fmt::Display for KeyHash {
    /// Lower-case hex, 32 digits.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// Size of the CDR encapsulation header that starts every encoding.
pub const ENCAPSULATION_HEADER_LEN: usize = 4;

/// Largest key serialization that is used as the key hash directly (zero padded).
pub const KEY_HASH_LEN: usize = 16;

/// Initial buffer size of [`TopicType::encode`] when the type is unbounded.
pub const ENCODE_INITIAL_LEN: usize = 256;

/// Largest initial buffer [`TopicType::encode`] allocates for a bounded type; a larger
/// value is encoded in a second pass with the exact size.
pub const ENCODE_INITIAL_LEN_MAX: usize = 64 * 1024;

/// A DDS data type: what a typed topic, writer and reader are parameterised by.
pub trait TopicType: Sized + Clone + Send + Sync + 'static {
    /// Registered type name, IDL scoped with "::", e.g. "Avionics::AirData".
    const TYPE_NAME: &'static str;
    /// True when one Rust type carries samples of any DDS type ([`CdrSample`]): the
    /// topic's type name is then given when the topic is created, not by `TYPE_NAME`.
    const TYPE_NAME_AT_RUNTIME: bool = false;
    /// True when the type has @key members.
    const HAS_KEY: bool;
    /// Largest encoding incl. the 4-byte encapsulation header, when every member is bounded.
    const MAX_SERIALIZED_SIZE: Option<usize>;
    /// Largest big-endian CDR key serialization (None = unbounded).
    const KEY_MAX_SERIALIZED_SIZE: Option<usize>;
    /// IDL source that declares `TYPE_NAME`, self-contained (includes and macros already
    /// expanded), or `None` when the type has no IDL description. Run-time type
    /// descriptions read it: a content filter (DCPS `ContentFilteredTopic`,
    /// `QueryCondition`) resolves its member names against it. `spindle-idl` fills it in.
    const IDL_SOURCE: Option<&'static str> = None;
    /// The structural hash of the type's definition (`spindle_idl`'s
    /// `TypeLibrary::type_hash`: members, their names, types, bounds and `@key`, nested
    /// types expanded, never 0), or `None` when it is unknown (a hand-written impl, raw
    /// CDR). Readers and writers of one topic name and type name whose hashes are both
    /// known match only when they are equal: two programs that define one type name
    /// differently do not exchange bytes neither can decode. `spindle-idl` fills it in.
    const TYPE_HASH: Option<u64> = None;

    /// Encodes `self` as XCDR1 plain CDR with the 4-byte encapsulation header
    /// (CDR_BE `00 00` / CDR_LE `00 01`, options `00 00`) into `buf`; returns bytes written.
    /// Checks bounds ([`Error::BoundExceeded`]) and buffer size ([`Error::BufferTooSmall`])
    /// — never panics.
    fn encode_into(&self, endianness: Endianness, buf: &mut [u8]) -> Result<usize>;

    /// Same as [`TopicType::encode_into`], into a new `Vec`.
    fn encode(&self, endianness: Endianness) -> Result<Vec<u8>> {
        let initial = Self::MAX_SERIALIZED_SIZE.unwrap_or(ENCODE_INITIAL_LEN);
        let mut buf = vec![0u8; initial.min(ENCODE_INITIAL_LEN_MAX)];
        match self.encode_into(endianness, &mut buf) {
            Ok(n) => {
                buf.truncate(n);
                Ok(buf)
            }
            Err(Error::BufferTooSmall { needed, .. }) => {
                buf.resize(needed, 0);
                let n = self.encode_into(endianness, &mut buf)?;
                buf.truncate(n);
                Ok(buf)
            }
            Err(e) => Err(e),
        }
    }

    /// Decodes from a borrowed slice that starts with the encapsulation header. Never panics.
    fn decode(bytes: &[u8]) -> Result<Self>;

    /// Decodes a sample whose instance's key hash the middleware already knows (a reader
    /// has it from the sample's header). The default ignores it and calls
    /// [`TopicType::decode`]; a type that carries the key hash rather than the key
    /// ([`CdrSample`]) keeps it.
    fn decode_with_key_hash(bytes: &[u8], key_hash: &KeyHash) -> Result<Self> {
        let _ = key_hash;
        Self::decode(bytes)
    }

    /// Decodes into `self`, replacing its value, so that a reader decoding sample after
    /// sample into the same values (`DataReader::take_into`) reuses their allocations
    /// instead of allocating and freeing one value per sample. The default decodes a new
    /// value and moves it in; a type whose members own buffers may overwrite them in place.
    /// On an error `self` holds some valid value of the type, not necessarily the old one.
    /// Never panics.
    fn decode_in_place(&mut self, bytes: &[u8], key_hash: &KeyHash) -> Result<()> {
        *self = Self::decode_with_key_hash(bytes, key_hash)?;
        Ok(())
    }

    /// Appends the big-endian CDR serialization of the key members, in declaration order
    /// (RTPS 9.6.3.8); appends nothing when `HAS_KEY` is false.
    fn encode_key_be(&self, out: &mut Vec<u8>) -> Result<()>;

    /// The key hash: the serialized key zero-padded to 16 bytes when
    /// `KEY_MAX_SERIALIZED_SIZE` is `Some(n)` with `n <= 16`, else the MD5 of the
    /// serialized key. All zeros for a keyless type.
    fn key_hash(&self) -> Result<KeyHash> {
        let digest = |key: &mut Vec<u8>| -> Result<KeyHash> {
            key.clear();
            self.encode_key_be(key)?;
            Ok(cdr::key_hash_of(key, Self::KEY_MAX_SERIALIZED_SIZE))
        };
        KEY_SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut key) => digest(&mut key),
            // Only when a key's encoding asks for a key hash itself.
            Err(_) => digest(&mut Vec::new()),
        })
    }
}
