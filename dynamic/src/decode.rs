//! XCDR1 plain CDR → JSON, driven by the type description. Accepts exactly what the
//! generated code accepts (strict booleans, ASCII chars, known enumerators, bounds) and
//! checks every length against the bytes left before it reads.

use serde_json::{Map, Number, Value};
use spindle_idl::types::{TypeDef, TypeLibrary, TypeRef, UnionDef};
use spindle_topics::cdr::optional::{MEMBER_ID_MASK, PID_EXTENDED, PID_MASK};

use crate::error::{Error, Path, Result, Seg};
use crate::{select_branch, DECODE_VALUES_MAX, DEPTH_MAX};

/// A CDR byte stream being read; alignment is relative to its first byte.
pub(crate) struct Reader<'b> {
    bytes: &'b [u8],
    pos: usize,
    big: bool,
    /// Offset of `bytes[0]` in the whole input, for error messages.
    base: usize,
}

impl<'b> Reader<'b> {
    pub(crate) fn new(bytes: &'b [u8], big: bool, base: usize) -> Self {
        Reader {
            bytes,
            pos: 0,
            big,
            base,
        }
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'b [u8], String> {
        if n > self.left() {
            return Err(format!("needs {n} more bytes, {} left", self.left()));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn get<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let pad = (N - self.pos % N) % N;
        self.take(pad)?;
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        if !self.big {
            // Callers convert with from_be_bytes: reverse little-endian input.
            a.reverse();
        }
        Ok(a)
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        self.get::<4>().map(u32::from_be_bytes)
    }

    fn len(&mut self, what: &str) -> std::result::Result<usize, String> {
        let n = self.u32()? as usize;
        if n > self.left() {
            return Err(format!(
                "{what} length {n} exceeds the {} bytes left",
                self.left()
            ));
        }
        Ok(n)
    }
}

/// The decoder: a library, the path being decoded and the values left to produce.
pub(crate) struct Decoder<'a> {
    pub(crate) lib: &'a TypeLibrary,
    pub(crate) path: Path,
    values_left: usize,
}

fn float(x: f64) -> Value {
    match Number::from_f64(x) {
        Some(n) => Value::Number(n),
        None if x.is_nan() => Value::String("NaN".into()),
        None if x > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(lib: &'a TypeLibrary, root: &str) -> Self {
        Decoder {
            lib,
            path: Path::new(root),
            values_left: DECODE_VALUES_MAX,
        }
    }

    fn err(&self, r: &Reader<'_>, detail: impl Into<String>) -> Error {
        Error::Decode {
            path: self.path.render(),
            offset: r.base + r.pos,
            detail: detail.into(),
        }
    }

    /// Reads a discriminator (or enum, char, wchar, integer) of type `t` as an integer.
    fn disc(&self, r: &mut Reader<'_>, t: &TypeRef) -> Result<i128> {
        let e = |r: &Reader<'_>, d: String| self.err(r, d);
        Ok(match crate::encode::prim_len(t) {
            1 => {
                let b = r.get::<1>().map_err(|d| e(r, d))?[0];
                match t {
                    TypeRef::I8 => i128::from(b as i8),
                    _ => i128::from(b),
                }
            }
            2 => {
                let b = r.get::<2>().map_err(|d| e(r, d))?;
                match t {
                    TypeRef::I16 => i128::from(i16::from_be_bytes(b)),
                    _ => i128::from(u16::from_be_bytes(b)),
                }
            }
            8 => {
                let b = r.get::<8>().map_err(|d| e(r, d))?;
                match t {
                    TypeRef::I64 => i128::from(i64::from_be_bytes(b)),
                    _ => i128::from(u64::from_be_bytes(b)),
                }
            }
            _ => {
                let b = r.get::<4>().map_err(|d| e(r, d))?;
                match t {
                    TypeRef::I32 => i128::from(i32::from_be_bytes(b)),
                    _ => i128::from(u32::from_be_bytes(b)),
                }
            }
        })
    }

    /// The JSON form of a discriminator value `x` of type `t`.
    fn disc_json(&self, r: &Reader<'_>, t: &TypeRef, x: i128) -> Result<Value> {
        Ok(match t {
            TypeRef::Bool => match x {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.err(r, format!("boolean byte {b:#04x} is neither 0 nor 1"))),
            },
            TypeRef::Char => {
                let b = x as u8;
                if !b.is_ascii() {
                    return Err(self.err(r, format!("char byte {b:#04x} is not ASCII")));
                }
                Value::String(char::from(b).to_string())
            }
            TypeRef::WChar => match char::from_u32(x as u32) {
                Some(c) => Value::String(c.to_string()),
                None => {
                    return Err(self.err(r, format!("wchar {x:#06x} is a lone surrogate")));
                }
            },
            TypeRef::Named(id) => match self.lib.get(*id) {
                TypeDef::Enum(e) => match e.enumerators.iter().find(|(_, v)| i128::from(*v) == x) {
                    Some((n, _)) => Value::String(n.clone()),
                    None => {
                        return Err(
                            self.err(r, format!("{} has no enumerator with value {x}", e.name))
                        )
                    }
                },
                other => {
                    return Err(self.err(r, format!("{} is not a discriminator", other.name())))
                }
            },
            // Integers: exact in JSON (serde_json keeps i64 and u64).
            _ if x < 0 => Value::from(x as i64),
            _ => Value::from(x as u64),
        })
    }

    /// Decodes a value of `t`.
    pub(crate) fn value(&mut self, r: &mut Reader<'_>, t: &TypeRef) -> Result<Value> {
        if self.path.depth() > DEPTH_MAX {
            return Err(self.err(r, format!("nested deeper than {DEPTH_MAX} levels")));
        }
        self.values_left = self.values_left.checked_sub(1).ok_or_else(|| {
            self.err(
                r,
                format!("more than {DECODE_VALUES_MAX} values in one sample"),
            )
        })?;
        Ok(match t {
            TypeRef::F32 => {
                let b = r.get::<4>().map_err(|d| self.err(r, d))?;
                float(f64::from(f32::from_be_bytes(b)))
            }
            TypeRef::F64 => {
                let b = r.get::<8>().map_err(|d| self.err(r, d))?;
                float(f64::from_be_bytes(b))
            }
            TypeRef::String(bound) => {
                let n = r.len("string").map_err(|d| self.err(r, d))?;
                let bytes = r.take(n).map_err(|d| self.err(r, d))?;
                let text = match bytes.split_last() {
                    None => "",
                    Some((0, text)) => std::str::from_utf8(text)
                        .map_err(|e| self.err(r, format!("string is not UTF-8: {e}")))?,
                    Some(_) => return Err(self.err(r, "string is not NUL-terminated")),
                };
                if let Some(b) = bound {
                    if text.len() as u64 > *b {
                        return Err(self.err(
                            r,
                            format!("string of {} bytes, its bound is {b}", text.len()),
                        ));
                    }
                }
                Value::String(text.to_string())
            }
            TypeRef::WString(bound) => {
                let n = r.len("wstring").map_err(|d| self.err(r, d))?;
                if n % 2 != 0 {
                    return Err(self.err(
                        r,
                        format!("wstring length {n} is odd (it counts bytes of UTF-16 code units)"),
                    ));
                }
                if let Some(b) = bound {
                    if (n / 2) as u64 > *b {
                        return Err(self.err(
                            r,
                            format!("wstring of {} UTF-16 code units, its bound is {b}", n / 2),
                        ));
                    }
                }
                let mut units = Vec::with_capacity(n / 2);
                for _ in 0..n / 2 {
                    let b = r.get::<2>().map_err(|d| self.err(r, d))?;
                    units.push(u16::from_be_bytes(b));
                }
                let text = String::from_utf16(&units)
                    .map_err(|_| self.err(r, "wstring holds an unpaired UTF-16 surrogate"))?;
                Value::String(text)
            }
            TypeRef::Sequence(inner, bound) => {
                let n = r.len("sequence").map_err(|d| self.err(r, d))?;
                if let Some(b) = bound {
                    if n as u64 > *b {
                        return Err(
                            self.err(r, format!("sequence of {n} elements, its bound is {b}"))
                        );
                    }
                }
                let mut items = Vec::with_capacity(n.min(crate::SEQUENCE_PREALLOC_MAX));
                for i in 0..n {
                    self.path.push(Seg::Index(i));
                    items.push(self.value(r, inner)?);
                    self.path.pop();
                }
                Value::Array(items)
            }
            TypeRef::Array(inner, dims) => {
                // Each element is at least one value: an array of more than are left
                // fails now, not after building them (elements of an empty struct take
                // no bytes, so the input's length does not bound them).
                if let Some(n) = crate::array_too_big(dims, self.values_left) {
                    return Err(self.err(
                        r,
                        format!(
                            "an array of {n} elements: more than the {} values left of the \
                             {DECODE_VALUES_MAX} one sample may hold",
                            self.values_left
                        ),
                    ));
                }
                self.array(r, inner, dims)?
            }
            TypeRef::Named(id) => match self.lib.get(*id) {
                TypeDef::Enum(_) => {
                    let x = self.disc(r, t)?;
                    self.disc_json(r, t, x)?
                }
                TypeDef::Struct(s) => {
                    let mut obj = Map::new();
                    for m in &s.members {
                        self.path.push(Seg::Member(m.name.clone()));
                        let v = if m.optional {
                            self.optional(r, &m.ty, m.id)?
                        } else {
                            self.value(r, &m.ty)?
                        };
                        self.path.pop();
                        obj.insert(m.name.clone(), v);
                    }
                    Value::Object(obj)
                }
                TypeDef::Union(u) => self.union(r, u)?,
            },
            prim => {
                let x = self.disc(r, prim)?;
                self.disc_json(r, prim, x)?
            }
        })
    }

    fn array(&mut self, r: &mut Reader<'_>, inner: &TypeRef, dims: &[u64]) -> Result<Value> {
        let Some((&n, rest)) = dims.split_first() else {
            return self.value(r, inner);
        };
        // `value` checked the element count: it fits a usize.
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let mut items = Vec::with_capacity(n.min(crate::SEQUENCE_PREALLOC_MAX));
        for i in 0..n {
            self.path.push(Seg::Index(i));
            items.push(self.array(r, inner, rest)?);
            self.path.pop();
        }
        Ok(Value::Array(items))
    }

    fn optional(&mut self, r: &mut Reader<'_>, t: &TypeRef, id: u32) -> Result<Value> {
        let short = r.u32().map_err(|d| self.err(r, d))?;
        let (pid, len) = if r.big {
            ((short >> 16) as u16, (short & 0xffff) as u16)
        } else {
            ((short & 0xffff) as u16, (short >> 16) as u16)
        };
        let (found, size) = if pid & PID_MASK == PID_EXTENDED {
            let found = r.u32().map_err(|d| self.err(r, d))? & MEMBER_ID_MASK;
            (found, r.u32().map_err(|d| self.err(r, d))?)
        } else {
            (u32::from(pid & PID_MASK), u32::from(len))
        };
        if found != id {
            return Err(self.err(r, format!("optional member id {found}, expected {id}")));
        }
        if size == 0 {
            return Ok(Value::Null);
        }
        let base = r.base + r.pos;
        let bytes = r.take(size as usize).map_err(|d| self.err(r, d))?;
        let mut inner = Reader::new(bytes, r.big, base);
        self.value(&mut inner, t)
    }

    fn union(&mut self, r: &mut Reader<'_>, u: &UnionDef) -> Result<Value> {
        let x = self.disc(r, &u.disc)?;
        let mut obj = Map::new();
        self.path.push(Seg::Member("discriminator".into()));
        let dj = self.disc_json(r, &u.disc, x);
        self.path.pop();
        obj.insert("discriminator".into(), dj?);
        if let Some(b) = select_branch(u, x) {
            self.path.push(Seg::Member(b.member.name.clone()));
            let v = self.value(r, &b.member.ty)?;
            self.path.pop();
            obj.insert(b.member.name.clone(), v);
        }
        Ok(Value::Object(obj))
    }
}
