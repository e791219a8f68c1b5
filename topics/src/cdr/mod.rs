//! CDR helpers that generated (and hand-written) [`TopicType`](crate::TopicType) impls call.
//!
//! * Encoding uses the `cdr` crate through serde, writing straight into the caller's slice
//!   ([`encode_into`]). XCDR1 alignment is relative to the first byte after the 4-byte
//!   encapsulation header, as the `cdr` crate does.
//! * Decoding ([`decode`]) uses this crate's own serde deserializer over the borrowed slice:
//!   the `cdr` crate's deserializer allocates whatever length a peer declares before checking
//!   it against the input (eight bad bytes ask for 4 GiB), and a decoder of bytes from
//!   outside must never panic or abort. Ours checks every length against the bytes left.
//! * Keys: [`encode_key_be`] and [`key_hash_of`] (RTPS 9.6.3.8).
//! * What plain serde + `cdr` get wrong for IDL: enums with explicit values ([`IdlEnum`]),
//!   unions with a typed discriminator ([`IdlUnion`]), `wchar` ([`WChar`]), `wstring`
//!   ([`WString`]), arrays longer than 32 ([`array`](mod@array)), bulk `sequence<octet>`
//!   ([`octets`]) and bounds ([`CheckBounds`]).

mod de;

use std::io;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, SeqAccess, Visitor};
use serde::ser::{SerializeTuple, Serializer};
use serde::{Deserialize, Deserializer, Serialize};

use crate::{Endianness, Error, KeyHash, Result, ENCAPSULATION_HEADER_LEN, KEY_HASH_LEN};

/// Encapsulation identifier of CDR_BE.
pub const CDR_BE: [u8; 2] = [0x00, 0x00];
/// Encapsulation identifier of CDR_LE.
pub const CDR_LE: [u8; 2] = [0x00, 0x01];

/// A `Write` over the caller's slice that keeps counting past the end, so one pass both
/// fills the buffer and tells how many bytes a complete encoding needs.
struct SliceWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl io::Write for SliceWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let end = self.pos.saturating_add(data.len());
        if end <= self.buf.len() {
            self.buf[self.pos..end].copy_from_slice(data);
        }
        self.pos = end;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn encode_error<T: ?Sized>(e: ::cdr::Error) -> Error {
    match e {
        ::cdr::Error::InvalidChar(c) => Error::InvalidValue {
            field: "char",
            detail: format!("{c:?} is not a one-byte (ASCII) IDL char"),
        },
        other => Error::Encode {
            type_name: std::any::type_name::<T>(),
            detail: other.to_string(),
        },
    }
}

/// Encodes `value` as XCDR1 plain CDR with the encapsulation header into `buf`; returns
/// the number of bytes written. [`Error::BufferTooSmall`] tells the exact size needed.
///
/// Bounds are not checked here: call [`CheckBounds::check_bounds`] first.
pub fn encode_into<T: Serialize + ?Sized>(
    value: &T,
    endianness: Endianness,
    buf: &mut [u8],
) -> Result<usize> {
    let available = buf.len();
    let mut w = SliceWriter { buf, pos: 0 };
    serialize_with_header(&mut w, value, endianness).map_err(encode_error::<T>)?;
    if w.pos > available {
        return Err(Error::BufferTooSmall {
            needed: w.pos,
            available,
        });
    }
    Ok(w.pos)
}

/// Encodes a type whose only member is a `sequence<octet>` (`payload`), with the
/// encapsulation header, into `buf`: the same bytes as [`encode_into`] gives, without
/// going through serde (the length, then one copy). [`Error::BufferTooSmall`] tells the
/// exact size needed.
pub fn encode_octets_into(payload: &[u8], endianness: Endianness, buf: &mut [u8]) -> Result<usize> {
    let len = u32::try_from(payload.len()).map_err(|_| Error::Encode {
        type_name: "sequence<octet>",
        detail: format!("{} bytes, more than a CDR length holds", payload.len()),
    })?;
    let needed = ENCAPSULATION_HEADER_LEN + 4 + payload.len();
    if buf.len() < needed {
        return Err(Error::BufferTooSmall {
            needed,
            available: buf.len(),
        });
    }
    let (id, len) = match endianness {
        Endianness::Little => (CDR_LE, len.to_le_bytes()),
        Endianness::Big => (CDR_BE, len.to_be_bytes()),
    };
    buf[..2].copy_from_slice(&id);
    buf[2..ENCAPSULATION_HEADER_LEN].fill(0);
    buf[ENCAPSULATION_HEADER_LEN..ENCAPSULATION_HEADER_LEN + 4].copy_from_slice(&len);
    buf[ENCAPSULATION_HEADER_LEN + 4..needed].copy_from_slice(payload);
    Ok(needed)
}

/// Decodes what [`encode_octets_into`] encodes: the `sequence<octet>` of a type that has
/// no other member, as [`decode`] would, without serde. Never panics: a short input or a
/// length past its end gives [`Error::Decode`] naming `type_name` and the offset.
pub fn decode_octets(bytes: &[u8], type_name: &'static str) -> Result<Vec<u8>> {
    octets_of(bytes, type_name).map(<[u8]>::to_vec)
}

/// [`decode_octets`] into `out`, replacing its contents and reusing its allocation. On an
/// error `out` is left as it was.
pub fn decode_octets_into(bytes: &[u8], type_name: &'static str, out: &mut Vec<u8>) -> Result<()> {
    let payload = octets_of(bytes, type_name)?;
    out.clear();
    out.extend_from_slice(payload);
    Ok(())
}

/// The `sequence<octet>` that [`encode_octets_into`] encoded, borrowed from `bytes`.
fn octets_of<'a>(bytes: &'a [u8], type_name: &'static str) -> Result<&'a [u8]> {
    let endianness = encapsulation(bytes)?;
    let body = &bytes[ENCAPSULATION_HEADER_LEN..];
    let Some(len) = body.get(..4) else {
        return Err(Error::Decode {
            type_name,
            offset: bytes.len(),
            detail: format!("needs 4 more bytes, {} left", body.len()),
        });
    };
    let len = [len[0], len[1], len[2], len[3]];
    let len = match endianness {
        Endianness::Little => u32::from_le_bytes(len),
        Endianness::Big => u32::from_be_bytes(len),
    } as usize;
    let rest = &body[4..];
    rest.get(..len).ok_or_else(|| Error::Decode {
        type_name,
        offset: ENCAPSULATION_HEADER_LEN + 4,
        detail: format!("needs {len} more bytes, {} left", rest.len()),
    })
}

/// Encodes `value` into a new `Vec` (header included).
pub fn encode<T: Serialize + ?Sized>(value: &T, endianness: Endianness) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    serialize_with_header(&mut buf, value, endianness).map_err(encode_error::<T>)?;
    Ok(buf)
}

thread_local! {
    /// Byte order of the encoding or decoding under way on this thread, for the few
    /// helpers ([`mod@optional`]) that must serialize a nested value on their own.
    static CURRENT_ENDIANNESS: std::cell::Cell<Option<Endianness>> =
        const { std::cell::Cell::new(None) };
}

/// Runs `f` with [`CURRENT_ENDIANNESS`] set, restoring the previous value after.
fn with_endianness<R>(endianness: Endianness, f: impl FnOnce() -> R) -> R {
    let previous = CURRENT_ENDIANNESS.with(|c| c.replace(Some(endianness)));
    let r = f();
    CURRENT_ENDIANNESS.with(|c| c.set(previous));
    r
}

fn current_endianness() -> Option<Endianness> {
    CURRENT_ENDIANNESS.with(|c| c.get())
}

fn serialize_with_header<W: io::Write, T: Serialize + ?Sized>(
    w: W,
    value: &T,
    endianness: Endianness,
) -> ::cdr::Result<()> {
    with_endianness(endianness, || match endianness {
        Endianness::Little => {
            ::cdr::serialize_into::<_, _, _, ::cdr::CdrLe>(w, value, ::cdr::Infinite)
        }
        Endianness::Big => {
            ::cdr::serialize_into::<_, _, _, ::cdr::CdrBe>(w, value, ::cdr::Infinite)
        }
    })
}

fn serialize_body<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
    endianness: Endianness,
) -> ::cdr::Result<()> {
    with_endianness(endianness, || match endianness {
        Endianness::Little => ::cdr::ser::serialize_data_into::<_, _, _, ::cdr::LittleEndian>(
            out,
            value,
            ::cdr::Infinite,
        ),
        Endianness::Big => ::cdr::ser::serialize_data_into::<_, _, _, ::cdr::BigEndian>(
            out,
            value,
            ::cdr::Infinite,
        ),
    })
}

/// Reads the encapsulation header: the byte order of what follows.
pub fn encapsulation(bytes: &[u8]) -> Result<Endianness> {
    let mut found = [0u8; 2];
    for (f, b) in found.iter_mut().zip(bytes) {
        *f = *b;
    }
    if bytes.len() < ENCAPSULATION_HEADER_LEN {
        return Err(Error::Decode {
            type_name: "encapsulation header",
            offset: bytes.len(),
            detail: format!("{} bytes, the header alone needs 4", bytes.len()),
        });
    }
    match found {
        CDR_BE => Ok(Endianness::Big),
        CDR_LE => Ok(Endianness::Little),
        _ => Err(Error::BadEncapsulation { found }),
    }
}

/// Decodes a `T` from `bytes`, which start with the encapsulation header (CDR_BE or CDR_LE;
/// the options bytes and any trailing padding are ignored). Never panics: bad input gives
/// [`Error::Decode`] or [`Error::BadEncapsulation`].
///
/// Bounds are not checked here: call [`CheckBounds::check_bounds`] on the result.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let endianness = encapsulation(bytes)?;
    decode_body(&bytes[ENCAPSULATION_HEADER_LEN..], endianness).map_err(|(offset, detail)| {
        Error::Decode {
            type_name: std::any::type_name::<T>(),
            offset: offset + ENCAPSULATION_HEADER_LEN,
            detail,
        }
    })
}

/// Decodes a `T` from a CDR body without header (alignment relative to `body[0]`).
/// On failure returns the offset in `body` and what was wrong.
pub fn decode_body<T: DeserializeOwned>(
    body: &[u8],
    endianness: Endianness,
) -> std::result::Result<T, (usize, String)> {
    with_endianness(endianness, || {
        let mut d = de::CdrDeserializer::new(body, endianness);
        T::deserialize(&mut d).map_err(|e| (d.position(), e.to_string()))
    })
}

/// Serializes `k` zero bytes with no alignment: primes the serializer's position.
struct Prefix(usize);

impl Serialize for Prefix {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(self.0)?;
        for _ in 0..self.0 {
            t.serialize_element(&0u8)?;
        }
        t.end()
    }
}

/// Appends the big-endian CDR serialization of `key` (usually a tuple of references to
/// the key members, in declaration order) to `out`. Alignment is relative to the start
/// of `out`, so nested keys can be appended one after another to the same `Vec`.
pub fn encode_key_be<T: Serialize + ?Sized>(key: &T, out: &mut Vec<u8>) -> Result<()> {
    let skip = out.len() % 8;
    let start = out.len();
    // The serializer aligns relative to what it wrote: `skip` bytes of prefix first put
    // the key where `out`'s alignment wants it; then the prefix is taken out again.
    if let Err(e) = serialize_body(out, &(Prefix(skip), key), Endianness::Big) {
        out.truncate(start);
        return Err(encode_error::<T>(e));
    }
    out.drain(start..start + skip);
    Ok(())
}

/// The RTPS key hash of a serialized (big-endian CDR) key: zero-padded to 16 bytes when
/// the type's key can never exceed 16 bytes, else its MD5 digest.
///
/// Digests of keys of at most [`KEY_HASH_MEMO_KEY_BYTES_MAX`] bytes are remembered per
/// thread ([`KEY_HASH_MEMO_ENTRIES`] of them, direct-mapped): a writer that cycles through
/// a few instances of a string-keyed topic pays the MD5 once per instance, not per sample.
pub fn key_hash_of(serialized_key: &[u8], key_max_serialized_size: Option<usize>) -> KeyHash {
    let fits = matches!(key_max_serialized_size, Some(n) if n <= KEY_HASH_LEN);
    let mut hash = [0u8; KEY_HASH_LEN];
    if fits && serialized_key.len() <= KEY_HASH_LEN {
        hash[..serialized_key.len()].copy_from_slice(serialized_key);
        return KeyHash(hash);
    }
    if serialized_key.len() > KEY_HASH_MEMO_KEY_BYTES_MAX {
        return KeyHash(md5_of(serialized_key));
    }
    KEY_HASH_MEMO.with(|memo| {
        let Ok(mut memo) = memo.try_borrow_mut() else {
            return KeyHash(md5_of(serialized_key));
        };
        if memo.is_empty() {
            memo.resize(KEY_HASH_MEMO_ENTRIES, None);
        }
        let entry = &mut memo[memo_index(serialized_key)];
        match entry {
            // A hit only on the same bytes: the memo never changes a key's hash.
            Some(e) if e.key[..usize::from(e.len)] == *serialized_key => KeyHash(e.hash),
            _ => {
                let digest = md5_of(serialized_key);
                let mut key = [0u8; KEY_HASH_MEMO_KEY_BYTES_MAX];
                key[..serialized_key.len()].copy_from_slice(serialized_key);
                *entry = Some(MemoEntry {
                    len: serialized_key.len() as u8,
                    key,
                    hash: digest,
                });
                KeyHash(digest)
            }
        }
    })
}

/// Entries in each thread's memo of key digests ([`key_hash_of`]).
pub const KEY_HASH_MEMO_ENTRIES: usize = 64;

/// Longest serialized key whose digest [`key_hash_of`] remembers; longer keys are digested
/// every time.
pub const KEY_HASH_MEMO_KEY_BYTES_MAX: usize = 48;

const _: () = assert!(KEY_HASH_MEMO_ENTRIES.is_power_of_two());
const _: () = assert!(KEY_HASH_MEMO_KEY_BYTES_MAX <= u8::MAX as usize);

/// One remembered key and its digest.
#[derive(Clone, Copy)]
struct MemoEntry {
    len: u8,
    key: [u8; KEY_HASH_MEMO_KEY_BYTES_MAX],
    hash: [u8; KEY_HASH_LEN],
}

thread_local! {
    /// This thread's key digests, filled on first use.
    static KEY_HASH_MEMO: std::cell::RefCell<Vec<Option<MemoEntry>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn md5_of(bytes: &[u8]) -> [u8; KEY_HASH_LEN] {
    use md5::{Digest, Md5};
    Md5::digest(bytes).into()
}

/// The memo slot of a key: FNV-1a of its bytes.
fn memo_index(key: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h as usize) & (KEY_HASH_MEMO_ENTRIES - 1)
}

/// Returns [`Error::BoundExceeded`] when `len > max`. Strings count bytes, sequences
/// elements.
pub fn check_len(field: &'static str, len: usize, max: usize) -> Result<()> {
    if len > max {
        Err(Error::BoundExceeded { field, len, max })
    } else {
        Ok(())
    }
}

/// Checks every bounded string and sequence inside a value. Generated types implement it
/// with [`check_len`] for their bounded members and by recursing into the others.
pub trait CheckBounds {
    /// `Err(BoundExceeded)` when some bounded member is too long.
    fn check_bounds(&self) -> Result<()>;
}

macro_rules! unbounded_leaf {
    ($($t:ty),*) => {$(
        impl CheckBounds for $t {
            fn check_bounds(&self) -> Result<()> { Ok(()) }
        }
    )*};
}
unbounded_leaf!(bool, u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, char, String, WChar, WString);

impl<T: CheckBounds> CheckBounds for Vec<T> {
    fn check_bounds(&self) -> Result<()> {
        self.iter().try_for_each(CheckBounds::check_bounds)
    }
}

impl<T: CheckBounds, const N: usize> CheckBounds for [T; N] {
    fn check_bounds(&self) -> Result<()> {
        self.iter().try_for_each(CheckBounds::check_bounds)
    }
}

/// An IDL enum: 32-bit on the wire (XCDR1), enumerators keep their IDL values
/// (`@value` or declaration position).
pub trait IdlEnum: Sized + Copy {
    /// Scoped IDL name, for error messages.
    const IDL_NAME: &'static str;
    /// The enumerator's wire value.
    fn value(self) -> u32;
    /// The enumerator with that wire value, if any.
    fn from_value(value: u32) -> Option<Self>;
}

/// `Serialize` body for an [`IdlEnum`]: `fn serialize(..) { cdr::serialize_enum(self, s) }`.
pub fn serialize_enum<E: IdlEnum, S: Serializer>(
    value: &E,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u32(value.value())
}

/// `Deserialize` body for an [`IdlEnum`]; an unknown value is an error.
pub fn deserialize_enum<'de, E: IdlEnum, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<E, D::Error> {
    let v = u32::deserialize(d)?;
    E::from_value(v).ok_or_else(|| {
        serde::de::Error::custom(format!("{} has no enumerator with value {v}", E::IDL_NAME))
    })
}

/// An IDL union: the discriminator (its IDL type on the wire), then the selected member,
/// or nothing when the discriminator selects no member.
///
/// Rust shape (see [`Reading`](crate::builtin::examples::Reading)): one variant per
/// branch; a branch with exactly one label holds just its member, a branch with several
/// labels or the default branch also holds the discriminator (`Level(i16, f64)`). When
/// some discriminator values select no member (no default branch, labels not covering
/// every value), one more variant holds only the discriminator, e.g.
/// `Unselected(ConstraintKind)`; `serialize_member` writes nothing for it and
/// `deserialize_member` returns it for every value no label names.
pub trait IdlUnion: Sized {
    /// Scoped IDL name, for error messages.
    const IDL_NAME: &'static str;
    /// The discriminator's Rust type (`i32`, `i16`, `u8`, `char`, `bool` or an [`IdlEnum`]).
    type Discriminator: Serialize + DeserializeOwned;
    /// The discriminator value this union carries.
    fn discriminator(&self) -> Self::Discriminator;
    /// Serializes the selected member (nothing when none is selected), e.g.
    /// `match self { U::A(v) => t.serialize_element(v), .. }`.
    fn serialize_member<T: SerializeTuple>(&self, t: &mut T) -> std::result::Result<(), T::Error>;
    /// Reads the member that `discriminator` selects from `seq` with [`union_member`];
    /// rejects discriminators no branch accepts (only when nothing is selected by default).
    fn deserialize_member<'de, A: SeqAccess<'de>>(
        discriminator: Self::Discriminator,
        seq: &mut A,
    ) -> std::result::Result<Self, A::Error>;
}

/// `Serialize` body for an [`IdlUnion`].
pub fn serialize_union<U: IdlUnion, S: Serializer>(
    value: &U,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    let mut t = s.serialize_tuple(2)?;
    t.serialize_element(&value.discriminator())?;
    value.serialize_member(&mut t)?;
    t.end()
}

/// `Deserialize` body for an [`IdlUnion`].
pub fn deserialize_union<'de, U: IdlUnion, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<U, D::Error> {
    struct V<U>(PhantomData<U>);
    impl<'de, U: IdlUnion> Visitor<'de> for V<U> {
        type Value = U;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "union {}", U::IDL_NAME)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<U, A::Error> {
            let disc: U::Discriminator = union_member(&mut seq, U::IDL_NAME)?;
            U::deserialize_member(disc, &mut seq)
        }
    }
    d.deserialize_tuple(2, V(PhantomData))
}

/// Reads the next element (a union's discriminator or member) from `seq`.
pub fn union_member<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
    seq: &mut A,
    union_name: &'static str,
) -> std::result::Result<T, A::Error> {
    seq.next_element()?
        .ok_or_else(|| serde::de::Error::custom(format!("union {union_name} is truncated")))
}

/// The error [`IdlUnion::deserialize_member`] returns for a discriminator no branch takes.
pub fn bad_discriminator<E: serde::de::Error>(
    union_name: &'static str,
    value: impl std::fmt::Debug,
) -> E {
    E::custom(format!(
        "union {union_name}: discriminator {value:?} selects no member"
    ))
}

/// IDL `wchar`: one UTF-16 code unit (2 bytes, aligned 2) in XCDR1. Only characters of the
/// Basic Multilingual Plane fit; others are an encode error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WChar(pub char);

impl Serialize for WChar {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut units = [0u16; 2];
        match self.0.encode_utf16(&mut units) {
            [u] => s.serialize_u16(*u),
            _ => Err(serde::ser::Error::custom(format!(
                "wchar {:?} is outside the Basic Multilingual Plane",
                self.0
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for WChar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let u = u16::deserialize(d)?;
        char::from_u32(u32::from(u))
            .map(WChar)
            .ok_or_else(|| serde::de::Error::custom(format!("wchar {u:#06x} is a lone surrogate")))
    }
}

/// Most UTF-16 code units reserved before they are read when decoding a `wstring` (the
/// rest grow as they arrive, so a forged length cannot allocate more than the input).
pub const WSTRING_PREALLOC_UNITS_MAX: usize = 4096;

/// IDL `wstring` / `wstring<N>`: text kept as UTF-8 in memory, and in XCDR1 a u32 length
/// in bytes (twice the UTF-16 code units) followed by the UTF-16 code units, without a
/// terminator — as Cyclone DDS encodes it (`dds_stream_write_wstringBO`). Characters
/// outside the Basic Multilingual Plane take two code units (a surrogate pair); a bound
/// counts code units. Decoding refuses an odd length and unpaired surrogates.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WString(pub String);

impl WString {
    /// UTF-16 code units: what a `wstring<N>` bound counts.
    pub fn len(&self) -> usize {
        self.0.encode_utf16().count()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for WString {
    fn from(s: &str) -> Self {
        WString(s.to_string())
    }
}

impl From<String> for WString {
    fn from(s: String) -> Self {
        WString(s)
    }
}

impl std::fmt::Display for WString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for WString {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let units = self.len();
        let bytes = u32::try_from(2 * units).map_err(|_| {
            serde::ser::Error::custom(format!("wstring of {units} code units is too long"))
        })?;
        let mut t = s.serialize_tuple(1 + units)?;
        t.serialize_element(&bytes)?;
        for u in self.0.encode_utf16() {
            t.serialize_element(&u)?;
        }
        t.end()
    }
}

impl<'de> Deserialize<'de> for WString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = WString;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("wstring")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<WString, A::Error> {
                let truncated = || serde::de::Error::custom("wstring is truncated");
                let bytes: u32 = seq.next_element()?.ok_or_else(truncated)?;
                if bytes % 2 != 0 {
                    return Err(serde::de::Error::custom(format!(
                        "wstring length {bytes} is odd (it counts bytes of UTF-16 code units)"
                    )));
                }
                let n = (bytes / 2) as usize;
                let mut units = Vec::with_capacity(n.min(WSTRING_PREALLOC_UNITS_MAX));
                for _ in 0..n {
                    units.push(seq.next_element::<u16>()?.ok_or_else(truncated)?);
                }
                String::from_utf16(&units).map(WString).map_err(|_| {
                    serde::de::Error::custom("wstring holds an unpaired UTF-16 surrogate")
                })
            }
        }
        // The length comes first: the tuple is as long as the visitor reads.
        d.deserialize_tuple(usize::MAX, V)
    }
}

/// `#[serde(with = "spindle_topics::cdr::octets")]` on a `Vec<u8>` (`sequence<octet>`):
/// same bytes on the wire as element-wise encoding, copied in bulk.
pub mod octets {
    use serde::de::{SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    /// Serializes as a CDR `sequence<octet>`.
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    /// Deserializes a CDR `sequence<octet>`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("sequence<octet>")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = seq.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// `#[serde(with = "spindle_topics::cdr::array")]` on a `[T; N]` of any length (serde
/// itself stops at 32): N elements, no length prefix.
pub mod array {
    use std::marker::PhantomData;

    use serde::de::{Deserialize, SeqAccess, Visitor};
    use serde::ser::{Serialize, SerializeTuple};
    use serde::{Deserializer, Serializer};

    /// Serializes the N elements in order.
    pub fn serialize<S: Serializer, T: Serialize, const N: usize>(
        v: &[T; N],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(N)?;
        for e in v {
            t.serialize_element(e)?;
        }
        t.end()
    }

    /// Deserializes exactly N elements.
    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>, const N: usize>(
        d: D,
    ) -> Result<[T; N], D::Error> {
        struct V<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = [T; N];
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "an array of {N} elements")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<[T; N], A::Error> {
                let mut out = Vec::with_capacity(N.min(super::ARRAY_PREALLOC_MAX));
                for i in 0..N {
                    match seq.next_element()? {
                        Some(e) => out.push(e),
                        None => return Err(serde::de::Error::invalid_length(i, &self)),
                    }
                }
                out.try_into()
                    .map_err(|_| serde::de::Error::custom("array length mismatch"))
            }
        }
        d.deserialize_tuple(N, V::<T, N>(PhantomData))
    }
}

/// IDL `@optional` members of `@final` structs in XCDR1: a parameter header (extended
/// form: `PID_EXTENDED | MUST_UNDERSTAND`, 8, member id, size), then the value with its
/// alignment restarting at zero, nothing when absent (size 0) — as Cyclone DDS encodes
/// them. The member id is the member's position (or its `@id`). Generated code:
///
/// ```text
/// #[serde(
///     serialize_with = "spindle_topics::cdr::optional::serialize::<_, _, 3>",
///     deserialize_with = "spindle_topics::cdr::optional::deserialize::<_, _, 3>"
/// )]
/// pub level: Option<f64>,
/// ```
///
/// Only inside [`encode_into`]/[`encode`]/[`decode`] (which tell it the byte order).
pub mod optional {
    use serde::de::{DeserializeOwned, SeqAccess, Visitor};
    use serde::ser::SerializeTuple;
    use serde::{Deserializer, Serialize, Serializer};

    use super::{current_endianness, decode_body, serialize_body};
    use crate::Endianness;

    /// Short parameter id announcing the extended (long) header.
    pub const PID_EXTENDED: u16 = 0x3f01;
    /// Must-understand flag of a short parameter id.
    pub const PID_FLAG_MUST_UNDERSTAND: u16 = 0x4000;
    /// Mask of the id in a short parameter header (keeps the implementation-specific bit).
    pub const PID_MASK: u16 = 0x3fff | 0x8000;
    /// Mask of the member id in an extended header (keeps the implementation-specific bit).
    pub const MEMBER_ID_MASK: u32 = 0x0fff_ffff | 0x8000_0000;
    /// Length field of the short header that announces an extended header.
    pub const EXTENDED_HEADER_LEN: u16 = 8;
    /// Most value bytes preallocated before they are read.
    pub const OPTIONAL_PREALLOC_MAX: usize = 4096;

    fn no_endianness() -> String {
        "optional members are only encoded inside spindle_topics::cdr::encode/decode".into()
    }

    /// Serializes an `@optional` member with id `ID`.
    pub fn serialize<T: Serialize, S: Serializer, const ID: u32>(
        value: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let e = current_endianness().ok_or_else(|| serde::ser::Error::custom(no_endianness()))?;
        let mut inner = Vec::new();
        if let Some(v) = value {
            serialize_body(&mut inner, v, e).map_err(serde::ser::Error::custom)?;
        }
        let size = u32::try_from(inner.len())
            .map_err(|_| serde::ser::Error::custom("optional member larger than 4 GiB"))?;
        let pid = u32::from(PID_EXTENDED | PID_FLAG_MUST_UNDERSTAND);
        let len = u32::from(EXTENDED_HEADER_LEN);
        // The two u16 of the short header, written as one aligned u32 in the stream's order.
        let short = match e {
            Endianness::Little => (len << 16) | pid,
            Endianness::Big => (pid << 16) | len,
        };
        let mut t = s.serialize_tuple(3 + inner.len())?;
        t.serialize_element(&short)?;
        t.serialize_element(&ID)?;
        t.serialize_element(&size)?;
        for b in &inner {
            t.serialize_element(b)?;
        }
        t.end()
    }

    /// Deserializes an `@optional` member with id `ID` (short or extended header).
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>, const ID: u32>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        struct V<T, const ID: u32>(std::marker::PhantomData<T>);
        impl<'de, T: DeserializeOwned, const ID: u32> Visitor<'de> for V<T, ID> {
            type Value = Option<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "optional member {ID}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<T>, A::Error> {
                use serde::de::Error;
                let e = current_endianness().ok_or_else(|| A::Error::custom(no_endianness()))?;
                let mut next_u32 = || -> Result<u32, A::Error> {
                    seq.next_element()?
                        .ok_or_else(|| A::Error::custom("truncated optional"))
                };
                let short = next_u32()?;
                let (pid, len) = match e {
                    Endianness::Little => ((short & 0xffff) as u16, (short >> 16) as u16),
                    Endianness::Big => ((short >> 16) as u16, (short & 0xffff) as u16),
                };
                let (id, size) = if pid & PID_MASK == PID_EXTENDED {
                    (next_u32()? & MEMBER_ID_MASK, next_u32()?)
                } else {
                    (u32::from(pid & PID_MASK), u32::from(len))
                };
                if id != ID {
                    return Err(A::Error::custom(format!(
                        "optional member id {id}, expected {ID}"
                    )));
                }
                if size == 0 {
                    return Ok(None);
                }
                let size = size as usize;
                let mut bytes = Vec::with_capacity(size.min(OPTIONAL_PREALLOC_MAX));
                for _ in 0..size {
                    let b: u8 = seq
                        .next_element()?
                        .ok_or_else(|| A::Error::custom("truncated optional"))?;
                    bytes.push(b);
                }
                decode_body(&bytes, e).map(Some).map_err(|(at, what)| {
                    A::Error::custom(format!("in optional member {ID} at {at}: {what}"))
                })
            }
        }
        d.deserialize_tuple(usize::MAX, V::<T, ID>(std::marker::PhantomData))
    }
}

/// Most elements an array decoder reserves room for before it has read them.
pub const ARRAY_PREALLOC_MAX: usize = 4096;

pub use de::SEQUENCE_PREALLOC_MAX;

/// Marks a residue no encoding reaches in [`MaxSize`].
const UNREACHABLE: usize = usize::MAX;

/// Worst-case encoded size of a bounded type, computed in `const` context (for
/// `MAX_SERIALIZED_SIZE` and `KEY_MAX_SERIALIZED_SIZE`).
///
/// Padding depends on where a member starts, so this tracks, for each position modulo 8,
/// the largest position an encoding can reach with that residue; each member transforms
/// that state. The result is exact: the largest size any value of the type encodes to,
/// or `usize::MAX` when that exceeds what a `usize` holds (`double m[4294967295][4294967295]`
/// declares 147 exabytes): the arithmetic saturates, never overflows, and a size of
/// `usize::MAX` means "no usable bound" (as `None`, unbounded, would).
/// Generated types get a `const fn max_size_from(s: MaxSize) -> MaxSize` that applies
/// their members in order; sequences of such types loop over the element count:
///
/// ```
/// use spindle_topics::cdr::MaxSize;
/// // struct { short x; long long y; string<8> name; sequence<short, 3> s; }
/// const fn point(s: MaxSize) -> MaxSize {
///     s.primitive(2).primitive(8).string(8).primitive_sequence(2, 3)
/// }
/// // x 0..2, pad, y 8..16, name 16..20 + 9, pad, s 32..36 + 3 * 2 = 42
/// const MAX: usize = point(MaxSize::start()).encoded();
/// assert_eq!(MAX, 4 + 42);
///
/// // sequence<Point, 2> is the length, then 0, 1 or 2 elements:
/// const fn two_points(s: MaxSize) -> MaxSize {
///     let mut cur = s.primitive(4);
///     let mut all = cur;
///     let mut i = 0;
///     while i < 2 {
///         cur = point(cur);
///         all = all.either(cur);
///         i += 1;
///     }
///     all
/// }
/// // length 0..4, first point 4..42, second point 42..82 (its y is at 48, not 50)
/// assert_eq!(two_points(MaxSize::start()).size(), 82);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxSize {
    /// `reach[r]`: largest reachable position `p` with `p % 8 == r`, or `UNREACHABLE`.
    reach: [usize; 8],
    /// Some encoding reaches past `usize::MAX - 1`: [`MaxSize::size`] is `usize::MAX`.
    saturated: bool,
}

/// `a * b + c`, `None` past `usize::MAX`.
const fn mul_add(a: usize, b: usize, c: usize) -> Option<usize> {
    match a.checked_mul(b) {
        Some(x) => x.checked_add(c),
        None => None,
    }
}

impl MaxSize {
    /// The empty encoding: position 0 (right after the encapsulation header, or the start
    /// of a key).
    pub const fn start() -> Self {
        let mut reach = [UNREACHABLE; 8];
        reach[0] = 0;
        MaxSize {
            reach,
            saturated: false,
        }
    }

    /// No position reached yet, saturated if `self` is (every step carries it on).
    const fn none_after(self) -> Self {
        MaxSize {
            reach: [UNREACHABLE; 8],
            saturated: self.saturated,
        }
    }

    /// Notes reachable position `pos`; `None` (it overflowed `usize`) saturates.
    const fn put(&mut self, pos: Option<usize>) {
        let pos = match pos {
            Some(p) if p != UNREACHABLE => p,
            _ => {
                self.saturated = true;
                return;
            }
        };
        let r = pos % 8;
        if self.reach[r] == UNREACHABLE || self.reach[r] < pos {
            self.reach[r] = pos;
        }
    }

    /// Then a primitive of `size` bytes (1, 2, 4 or 8), aligned to its size.
    pub const fn primitive(self, size: usize) -> Self {
        let mut out = self.none_after();
        let mut r = 0;
        while r < 8 {
            let p = self.reach[r];
            if p != UNREACHABLE {
                out.put(mul_add(p.div_ceil(size), size, size));
            }
            r += 1;
        }
        out
    }

    /// Then `count` primitives of `size` bytes (an array: no length prefix).
    pub const fn primitive_array(self, size: usize, count: usize) -> Self {
        if count == 0 {
            return self;
        }
        let out = self.primitive(size);
        let mut shifted = out.none_after();
        let rest = size.checked_mul(count - 1);
        let mut r = 0;
        while r < 8 {
            if out.reach[r] != UNREACHABLE {
                shifted.put(match rest {
                    Some(rest) => out.reach[r].checked_add(rest),
                    None => None,
                });
            }
            r += 1;
        }
        shifted
    }

    /// Adds `min..=max` bytes with no alignment.
    const fn bytes(self, min: usize, max: usize) -> Self {
        let mut out = self.none_after();
        if min > max {
            return out;
        }
        // The largest 8 lengths reach every residue reachable at all.
        let largest = if max - min < 7 { max - min } else { 7 };
        let mut r = 0;
        while r < 8 {
            let p = self.reach[r];
            if p != UNREACHABLE {
                let mut i = 0;
                while i <= largest {
                    out.put(p.checked_add(max - i));
                    i += 1;
                }
            }
            r += 1;
        }
        out
    }

    /// Then a `string<max_len>`: a u32 length, up to `max_len` bytes and the NUL.
    pub const fn string(self, max_len: usize) -> Self {
        let len = self.primitive(4);
        match max_len.checked_add(1) {
            Some(max) => len.bytes(1, max),
            None => {
                let mut out = len;
                out.saturated = true;
                out
            }
        }
    }

    /// Then a `wstring<max_units>`: a u32 length and up to `max_units` 2-byte code units.
    pub const fn wstring(self, max_units: usize) -> Self {
        self.primitive_sequence(2, max_units)
    }

    /// Then a `sequence<P, max_len>` of primitives of `size` bytes.
    pub const fn primitive_sequence(self, size: usize, max_len: usize) -> Self {
        let len = self.primitive(4);
        if max_len == 0 {
            return len;
        }
        let first = len.primitive(size);
        // After the first element the position is aligned to `size`: k more elements add
        // k * size bytes.
        let mut more = first.none_after();
        let mut r = 0;
        while r < 8 {
            let p = first.reach[r];
            if p != UNREACHABLE {
                let mut k = max_len.saturating_sub(8);
                while k < max_len {
                    more.put(mul_add(k, size, p));
                    k += 1;
                }
            }
            r += 1;
        }
        len.either(more)
    }

    /// Then an `@optional` member whose value takes at most `value_max_size` bytes
    /// (its own [`MaxSize::size`] from [`MaxSize::start`]): 12 header bytes, then the value.
    pub const fn optional(self, value_max_size: usize) -> Self {
        self.primitive(4)
            .primitive(4)
            .primitive(4)
            .bytes(0, value_max_size)
    }

    /// Either this or `other` (union branches, sequence lengths).
    pub const fn either(self, other: Self) -> Self {
        let mut out = self;
        out.saturated = self.saturated || other.saturated;
        let mut r = 0;
        while r < 8 {
            if other.reach[r] != UNREACHABLE {
                out.put(Some(other.reach[r]));
            }
            r += 1;
        }
        out
    }

    /// The largest reachable position: the worst-case body (or key) size; `usize::MAX`
    /// when it does not fit a `usize` (see [`MaxSize`]).
    pub const fn size(self) -> usize {
        if self.saturated {
            return usize::MAX;
        }
        let mut max = 0;
        let mut r = 0;
        while r < 8 {
            if self.reach[r] != UNREACHABLE && self.reach[r] > max {
                max = self.reach[r];
            }
            r += 1;
        }
        max
    }

    /// [`MaxSize::size`] plus the encapsulation header: a `MAX_SERIALIZED_SIZE`
    /// (`usize::MAX`, saturated, when it does not fit a `usize`).
    pub const fn encoded(self) -> usize {
        self.size().saturating_add(ENCAPSULATION_HEADER_LEN)
    }
}
