//! # spindle-dynamic — topic types known only at run time
//!
//! A [`DynType`] is a struct type read from an IDL file at run time (the IDL compiler's
//! own front end, [`spindle_idl::types`]): structs (with inheritance), nested structs,
//! enums, unions, bounded and unbounded strings and sequences, arrays, typedefs, modules,
//! `@key` and `@optional`. It encodes JSON into XCDR1 plain CDR and decodes CDR into
//! JSON, byte for byte as the code `spindle-idl` generates for the same IDL does, and
//! computes the RTPS key hash the same way (RTPS 9.6.3.8: the big-endian key, zero-padded
//! when it can never exceed 16 bytes, else its MD5). This is what the `spindle` command's
//! `pub` and `sub` use.
//!
//! ```
//! use spindle_dynamic::DynType;
//! use spindle_topics::Endianness;
//!
//! let idl = "module M { enum Color { RED, GREEN };
//!            struct Pixel { @key long id; Color color; string<4> tag; }; };";
//! let t = DynType::from_idl_source("pixel.idl", idl, "M::Pixel").unwrap();
//! let sample = t
//!     .encode_json_str(r#"{"id": 7, "color": "GREEN", "tag": "ok"}"#, Endianness::Little)
//!     .unwrap();
//! // header, id 7, color 1, tag: length 3, "ok\0"
//! assert_eq!(
//!     sample.bytes,
//!     [0, 1, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, b'o', b'k', 0]
//! );
//! assert_eq!(&sample.key_hash.0[..4], &[0, 0, 0, 7]);
//! assert_eq!(t.decode_json(&sample.bytes).unwrap()["color"], "GREEN");
//!
//! // A value that does not fit names the member.
//! let err = t.encode_json_str(r#"{"id": 7, "color": "BLUE", "tag": "ok"}"#, Endianness::Little);
//! assert_eq!(
//!     err.unwrap_err().to_string(),
//!     "M::Pixel.color: M::Color has no enumerator \"BLUE\" (it has RED, GREEN)"
//! );
//! ```
//!
//! ## JSON form
//!
//! | IDL | JSON |
//! |---|---|
//! | struct | object with every member (an `@optional` one may be absent or `null`); unknown members are errors |
//! | integers, `octet` | numbers (range checked) |
//! | `float`, `double` | numbers; `"NaN"`, `"Infinity"`, `"-Infinity"` as strings |
//! | `boolean` | `true` / `false` |
//! | `char`, `wchar` | one-character strings |
//! | `string`, `string<N>` | strings (bound checked in bytes) |
//! | `wstring`, `wstring<N>` | strings (bound checked in UTF-16 code units) |
//! | `sequence`, arrays | arrays (nested for more dimensions; arrays must be full) |
//! | enum | the enumerator's name (a number is accepted on input) |
//! | union | `{"discriminator": d, "<member>": v}`; `discriminator` may be left out when the member has exactly one label |
#![deny(missing_docs)]

mod decode;
mod encode;
mod error;
pub mod random;
mod size;

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use spindle_idl::types::{BranchDef, TypeDef, TypeLibrary, TypeRef, UnionDef};
use spindle_topics::cdr::{self, MaxSize};
use spindle_topics::{Endianness, KeyHash, ENCAPSULATION_HEADER_LEN};

pub use error::{Error, Result};

/// Deepest nesting of values (recursive types through sequences) encoded or decoded.
pub const DEPTH_MAX: usize = 256;
/// Most values (members, elements) one decoded sample may produce.
pub const DECODE_VALUES_MAX: usize = 1 << 24;
/// Most sequence or array elements reserved before they are read.
pub const SEQUENCE_PREALLOC_MAX: usize = 4096;
/// Step budget of the worst-case size computation of one type.
pub const SIZE_STEPS_MAX: u64 = 1 << 26;

/// One key member path: member names from the topic type down, and the key's type.
#[derive(Debug, Clone)]
struct KeyPath {
    names: Vec<String>,
    ty: TypeRef,
}

/// A topic type described at run time: a struct of a [`TypeLibrary`].
#[derive(Debug, Clone)]
pub struct DynType {
    lib: Arc<TypeLibrary>,
    root: TypeRef,
    name: String,
    keys: Vec<KeyPath>,
    max_serialized_size: Option<usize>,
    key_max_serialized_size: Option<usize>,
    type_hash: u64,
}

/// A sample encoded from JSON: its CDR bytes (encapsulation header included) and its key
/// hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedSample {
    /// XCDR1 plain CDR with the 4-byte encapsulation header.
    pub bytes: Vec<u8>,
    /// The RTPS key hash (all zeros for a keyless type).
    pub key_hash: KeyHash,
}

impl DynType {
    /// Reads `file` (searching `include_dirs` for `#include`s) and describes the struct
    /// `type_name` (scoped, `Avionics::AirData`).
    pub fn from_idl_file<Q: AsRef<Path>>(
        file: &Path,
        include_dirs: &[Q],
        type_name: &str,
    ) -> Result<Self> {
        let lib = TypeLibrary::from_file(file, include_dirs)?;
        Self::new(Arc::new(lib), type_name)
    }

    /// Describes the struct `type_name` of IDL source text (`name` is for diagnostics).
    pub fn from_idl_source(name: &str, source: &str, type_name: &str) -> Result<Self> {
        let lib = TypeLibrary::from_source(name, source, &[] as &[&str])?;
        Self::new(Arc::new(lib), type_name)
    }

    /// Describes the struct `type_name` of a library.
    pub fn new(lib: Arc<TypeLibrary>, type_name: &str) -> Result<Self> {
        let id = lib.lookup(type_name).ok_or_else(|| Error::UnknownType {
            name: type_name.to_string(),
            known: lib.struct_names().join(", "),
        })?;
        let (name, members) = match lib.get(id) {
            TypeDef::Struct(s) => (s.name.clone(), s.members.clone()),
            TypeDef::Union(_) => {
                return Err(Error::NotAStruct {
                    name: type_name.into(),
                    kind: "a union",
                })
            }
            TypeDef::Enum(_) => {
                return Err(Error::NotAStruct {
                    name: type_name.into(),
                    kind: "an enum",
                })
            }
        };
        let mut keys = Vec::new();
        key_paths(&lib, &members, &mut Vec::new(), 0, &mut keys);
        let root = TypeRef::Named(id);
        let too_complex = || Error::TooComplex {
            name: name.clone(),
            steps: SIZE_STEPS_MAX,
        };
        let mut sizer = size::Sizer::new(&lib, SIZE_STEPS_MAX);
        let max_serialized_size = if sizer.bounded(&root) {
            let s = sizer
                .size(&root, MaxSize::start())
                .map_err(|_| too_complex())?;
            Some(s.encoded())
        } else {
            None
        };
        let key_max_serialized_size = if keys.is_empty() {
            Some(0)
        } else if keys.iter().all(|k| sizer.bounded(&k.ty)) {
            let mut s = MaxSize::start();
            for k in &keys {
                s = sizer.size(&k.ty, s).map_err(|_| too_complex())?;
            }
            Some(s.size())
        } else {
            None
        };
        let type_hash = lib.type_hash(id);
        Ok(DynType {
            lib,
            root,
            name,
            keys,
            max_serialized_size,
            key_max_serialized_size,
            type_hash,
        })
    }

    /// The scoped IDL name (`Avionics::AirData`): the registered type name.
    pub fn type_name(&self) -> &str {
        &self.name
    }

    /// The library the type comes from.
    pub fn library(&self) -> &Arc<TypeLibrary> {
        &self.lib
    }

    /// The structural hash of the type's definition
    /// ([`TypeLibrary::type_hash`], never 0): what the generated code's
    /// `TopicType::TYPE_HASH` holds for the same IDL, and what DDS matching compares
    /// besides the type name.
    ///
    /// ```
    /// use spindle_dynamic::DynType;
    /// let a = DynType::from_idl_source("a.idl", "module T { struct Plain { long x; }; };", "T::Plain");
    /// let b = DynType::from_idl_source(
    ///     "b.idl",
    ///     "module T { struct Plain { string<8> x; double y; }; };",
    ///     "T::Plain",
    /// );
    /// assert_ne!(a.unwrap().type_hash(), b.unwrap().type_hash());
    /// ```
    pub fn type_hash(&self) -> u64 {
        self.type_hash
    }

    /// True when the type has `@key` members.
    pub fn has_key(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Largest encoding (header included) when every member is bounded, as the generated
    /// `TopicType::MAX_SERIALIZED_SIZE`.
    pub fn max_serialized_size(&self) -> Option<usize> {
        self.max_serialized_size
    }

    /// Largest big-endian key serialization, as the generated
    /// `TopicType::KEY_MAX_SERIALIZED_SIZE` (`Some(0)` for a keyless type).
    pub fn key_max_serialized_size(&self) -> Option<usize> {
        self.key_max_serialized_size
    }

    /// Encodes a JSON value as XCDR1 plain CDR (header included) and computes its key
    /// hash. Errors name the member path.
    pub fn encode_json(&self, value: &Value, endianness: Endianness) -> Result<EncodedSample> {
        let header = match endianness {
            Endianness::Little => [cdr::CDR_LE[0], cdr::CDR_LE[1], 0, 0],
            Endianness::Big => [cdr::CDR_BE[0], cdr::CDR_BE[1], 0, 0],
        };
        let mut w = encode::Writer::new(endianness, &header);
        let mut enc = encode::Encoder {
            lib: &self.lib,
            path: error::Path::new(&self.name),
        };
        enc.value(&mut w, &self.root, value)?;
        let key = self.key_be_checked(value)?;
        Ok(EncodedSample {
            bytes: w.buf,
            key_hash: cdr::key_hash_of(&key, self.key_max_serialized_size),
        })
    }

    /// [`DynType::encode_json`] of JSON text; malformed JSON is [`Error::Json`].
    pub fn encode_json_str(&self, text: &str, endianness: Endianness) -> Result<EncodedSample> {
        let v: Value = serde_json::from_str(text)?;
        self.encode_json(&v, endianness)
    }

    /// The big-endian CDR serialization of the key members of a value (RTPS 9.6.3.8);
    /// empty for a keyless type. The value is checked against the type first.
    pub fn key_be(&self, value: &Value) -> Result<Vec<u8>> {
        let mut w = encode::Writer::new(Endianness::Big, &[]);
        let mut enc = encode::Encoder {
            lib: &self.lib,
            path: error::Path::new(&self.name),
        };
        enc.value(&mut w, &self.root, value)?;
        self.key_be_checked(value)
    }

    /// The key of a value already checked against the type.
    fn key_be_checked(&self, value: &Value) -> Result<Vec<u8>> {
        let mut w = encode::Writer::new(Endianness::Big, &[]);
        let mut enc = encode::Encoder {
            lib: &self.lib,
            path: error::Path::new(&self.name),
        };
        for k in &self.keys {
            let mut v = value;
            for n in &k.names {
                enc.path.push(error::Seg::Member(n.clone()));
                v = v
                    .get(n)
                    .filter(|x| !x.is_null())
                    .ok_or_else(|| enc.path.value_err("a key member must be present"))?;
            }
            enc.value(&mut w, &k.ty, v)?;
            for _ in &k.names {
                enc.path.pop();
            }
        }
        Ok(w.buf)
    }

    /// The key members of a value (one of this type, as [`DynType::decode_json`] gives),
    /// nested as in the type: what names its instance. `Null` for a keyless type.
    pub fn key_json(&self, value: &Value) -> Value {
        if self.keys.is_empty() {
            return Value::Null;
        }
        let mut out = Value::Object(serde_json::Map::new());
        for k in &self.keys {
            let Some((last, path)) = k.names.split_last() else {
                continue;
            };
            let (mut from, mut to) = (value, Some(&mut out));
            for n in path {
                from = &from[n.as_str()];
                to = to.and_then(Value::as_object_mut).map(|o| {
                    o.entry(n.clone())
                        .or_insert_with(|| Value::Object(serde_json::Map::new()))
                });
            }
            if let Some(o) = to.and_then(Value::as_object_mut) {
                o.insert(last.clone(), from[last.as_str()].clone());
            }
        }
        out
    }

    /// The key hash of a JSON value.
    pub fn key_hash_json(&self, value: &Value) -> Result<KeyHash> {
        Ok(cdr::key_hash_of(
            &self.key_be(value)?,
            self.key_max_serialized_size,
        ))
    }

    /// Decodes XCDR1 plain CDR (header included; CDR_LE or CDR_BE) into JSON. Never
    /// panics: bad bytes are [`Error::Decode`] naming the member and the offset.
    pub fn decode_json(&self, bytes: &[u8]) -> Result<Value> {
        let e = cdr::encapsulation(bytes).map_err(Error::Encapsulation)?;
        let body = &bytes[ENCAPSULATION_HEADER_LEN..];
        let mut r = decode::Reader::new(body, e == Endianness::Big, ENCAPSULATION_HEADER_LEN);
        let mut d = decode::Decoder::new(&self.lib, &self.name);
        d.value(&mut r, &self.root)
    }
}

/// The element count of an array of `dims` (saturating at `u64::MAX`) if it exceeds
/// `left`, the values a builder or decoder may still make: refused before any element is
/// built (`decode.rs`, `random.rs`).
pub(crate) fn array_too_big(dims: &[u64], left: usize) -> Option<u64> {
    let n = dims.iter().fold(1u64, |a, d| a.saturating_mul(*d));
    usize::try_from(n).map_or(true, |n| n > left).then_some(n)
}

/// The branch a discriminator value selects: the one whose labels name it, else the
/// default branch, else none.
pub(crate) fn select_branch(u: &UnionDef, disc: i128) -> Option<&BranchDef> {
    u.branches
        .iter()
        .find(|b| b.labels.contains(&disc))
        .or_else(|| u.branches.iter().find(|b| b.default))
}

/// The key member paths of `members`, in declaration order; a key member of struct type
/// contributes its own keys when it has any, else itself (as the generated code).
fn key_paths(
    lib: &TypeLibrary,
    members: &[spindle_idl::types::MemberDef],
    prefix: &mut Vec<String>,
    depth: usize,
    out: &mut Vec<KeyPath>,
) {
    for m in members.iter().filter(|m| m.key) {
        prefix.push(m.name.clone());
        if let TypeRef::Named(id) = &m.ty {
            if let TypeDef::Struct(s) = lib.get(*id) {
                if depth < spindle_idl::types::NESTING_MAX && s.members.iter().any(|x| x.key) {
                    key_paths(lib, &s.members, prefix, depth + 1, out);
                    prefix.pop();
                    continue;
                }
            }
        }
        out.push(KeyPath {
            names: prefix.clone(),
            ty: m.ty.clone(),
        });
        prefix.pop();
    }
}
