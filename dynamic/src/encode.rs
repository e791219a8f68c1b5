//! JSON → XCDR1 plain CDR, driven by the type description: the same bytes the generated
//! code writes for the same value (alignment relative to the first byte after the
//! encapsulation header, 8-byte alignment for 8-byte primitives, `@optional` members with
//! an extended parameter header and their own alignment origin).

use serde_json::Value;
use spindle_idl::types::{BranchDef, TypeDef, TypeLibrary, TypeRef, UnionDef};
use spindle_topics::cdr::optional::{EXTENDED_HEADER_LEN, PID_EXTENDED, PID_FLAG_MUST_UNDERSTAND};
use spindle_topics::Endianness;

use crate::error::{Error, Path, Result, Seg};
use crate::{select_branch, DEPTH_MAX};

/// A CDR byte stream; alignment is relative to `origin`.
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
    origin: usize,
    big: bool,
}

impl Writer {
    pub(crate) fn new(endianness: Endianness, origin_bytes: &[u8]) -> Self {
        Writer {
            buf: origin_bytes.to_vec(),
            origin: origin_bytes.len(),
            big: endianness == Endianness::Big,
        }
    }

    fn endianness(&self) -> Endianness {
        if self.big {
            Endianness::Big
        } else {
            Endianness::Little
        }
    }

    fn align(&mut self, n: usize) {
        let pos = self.buf.len() - self.origin;
        let pad = (n - pos % n) % n;
        self.buf.resize(self.buf.len() + pad, 0);
    }

    /// An `N`-byte primitive given as its big-endian bytes, aligned to `N`.
    fn put<const N: usize>(&mut self, mut be: [u8; N]) {
        self.align(N);
        if !self.big {
            be.reverse();
        }
        self.buf.extend_from_slice(&be);
    }

    fn u32(&mut self, v: u32) {
        self.put(v.to_be_bytes());
    }
}

/// The encoder: a library, and the path of the value being encoded.
pub(crate) struct Encoder<'a> {
    pub(crate) lib: &'a TypeLibrary,
    pub(crate) path: Path,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Encoder<'_> {
    fn err(&self, detail: impl Into<String>) -> Error {
        self.path.value_err(detail)
    }

    fn expected(&self, what: &str, v: &Value) -> Error {
        self.err(format!("expected {what}, found {}", kind(v)))
    }

    fn int(&self, v: &Value, min: i128, max: i128, name: &str) -> Result<i128> {
        let x = match v {
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .ok_or_else(|| self.err(format!("expected an integer ({name}), found {n}")))?,
            other => return Err(self.expected(&format!("an integer ({name})"), other)),
        };
        if x < min || x > max {
            return Err(self.err(format!("{x} is out of range for {name} ({min}..={max})")));
        }
        Ok(x)
    }

    fn float(&self, v: &Value, name: &str) -> Result<f64> {
        match v {
            Value::Number(n) => n
                .as_f64()
                .ok_or_else(|| self.err(format!("{n} is not a {name}"))),
            Value::String(s) => match s.as_str() {
                "NaN" | "nan" => Ok(f64::NAN),
                "Infinity" | "inf" | "+Infinity" => Ok(f64::INFINITY),
                "-Infinity" | "-inf" => Ok(f64::NEG_INFINITY),
                _ => Err(self.err(format!(
                    "expected a number ({name}), found the string {s:?} (only \"NaN\", \"Infinity\" and \"-Infinity\" are numbers as strings)"
                ))),
            },
            other => Err(self.expected(&format!("a number ({name})"), other)),
        }
    }

    fn one_char(&self, v: &Value, name: &str) -> Result<char> {
        let s = v
            .as_str()
            .ok_or_else(|| self.expected(&format!("a one-character string ({name})"), v))?;
        let mut cs = s.chars();
        match (cs.next(), cs.next()) {
            (Some(c), None) => Ok(c),
            _ => Err(self.err(format!(
                "expected exactly one character ({name}), found {s:?}"
            ))),
        }
    }

    /// The numeric value of a discriminator or enum given in JSON.
    pub(crate) fn disc_value(&self, t: &TypeRef, v: &Value) -> Result<i128> {
        match t {
            TypeRef::Bool => v
                .as_bool()
                .map(i128::from)
                .ok_or_else(|| self.expected("a boolean", v)),
            TypeRef::Char => {
                let c = self.one_char(v, "char")?;
                if !c.is_ascii() {
                    return Err(self.err(format!("{c:?} is not a one-byte (ASCII) IDL char")));
                }
                Ok(i128::from(u32::from(c)))
            }
            TypeRef::WChar => {
                let c = self.one_char(v, "wchar")?;
                if c.len_utf16() != 1 {
                    return Err(self.err(format!(
                        "wchar {c:?} is outside the Basic Multilingual Plane"
                    )));
                }
                Ok(i128::from(u32::from(c)))
            }
            TypeRef::Named(id) => match self.lib.get(*id) {
                TypeDef::Enum(e) => match v {
                    Value::String(s) => e
                        .enumerators
                        .iter()
                        .find(|(n, _)| n == s)
                        .map(|(_, x)| i128::from(*x))
                        .ok_or_else(|| {
                            let names: Vec<&str> =
                                e.enumerators.iter().map(|(n, _)| n.as_str()).collect();
                            self.err(format!(
                                "{} has no enumerator {s:?} (it has {})",
                                e.name,
                                names.join(", ")
                            ))
                        }),
                    Value::Number(_) => {
                        let x = self.int(v, 0, i128::from(u32::MAX), "enum value")?;
                        if e.enumerators.iter().any(|(_, y)| i128::from(*y) == x) {
                            Ok(x)
                        } else {
                            Err(self.err(format!("{} has no enumerator with value {x}", e.name)))
                        }
                    }
                    other => Err(self.expected(&format!("an enumerator of {}", e.name), other)),
                },
                other => Err(self.err(format!("{} cannot be a discriminator", other.name()))),
            },
            t => {
                let (min, max, name) = int_range(t)
                    .ok_or_else(|| self.err("this type cannot be a discriminator".to_string()))?;
                self.int(v, min, max, name)
            }
        }
    }

    /// Writes a discriminator (or enum) value of type `t`.
    fn put_disc(&self, w: &mut Writer, t: &TypeRef, x: i128) {
        match prim_len(t) {
            1 => w.put([x as u8]),
            2 => w.put((x as u16).to_be_bytes()),
            8 => w.put((x as u64).to_be_bytes()),
            _ => w.u32(x as u32),
        }
    }

    /// Encodes `v` as a value of `t`.
    pub(crate) fn value(&mut self, w: &mut Writer, t: &TypeRef, v: &Value) -> Result<()> {
        if self.path.depth() > DEPTH_MAX {
            return Err(self.err(format!("nested deeper than {DEPTH_MAX} levels")));
        }
        match t {
            TypeRef::Bool => w.put([u8::from(
                v.as_bool().ok_or_else(|| self.expected("a boolean", v))?,
            )]),
            TypeRef::Char | TypeRef::WChar => {
                let x = self.disc_value(t, v)?;
                self.put_disc(w, t, x);
            }
            TypeRef::F32 => {
                let x = self.float(v, "float")?;
                if x.is_finite() && (x > f64::from(f32::MAX) || x < f64::from(f32::MIN)) {
                    return Err(self.err(format!("{x:?} is out of range for float")));
                }
                w.put((x as f32).to_be_bytes());
            }
            TypeRef::F64 => w.put(self.float(v, "double")?.to_be_bytes()),
            TypeRef::String(bound) => {
                let s = v.as_str().ok_or_else(|| self.expected("a string", v))?;
                if let Some(b) = bound {
                    if s.len() as u64 > *b {
                        return Err(
                            self.err(format!("string of {} bytes, its bound is {b}", s.len()))
                        );
                    }
                }
                let len =
                    u32::try_from(s.len() + 1).map_err(|_| self.err("string longer than 4 GiB"))?;
                w.u32(len);
                w.buf.extend_from_slice(s.as_bytes());
                w.buf.push(0);
            }
            TypeRef::WString(bound) => {
                let s = v.as_str().ok_or_else(|| self.expected("a string", v))?;
                let units = s.encode_utf16().count();
                if let Some(b) = bound {
                    if units as u64 > *b {
                        return Err(self.err(format!(
                            "wstring of {units} UTF-16 code units, its bound is {b}"
                        )));
                    }
                }
                let len =
                    u32::try_from(2 * units).map_err(|_| self.err("wstring longer than 4 GiB"))?;
                w.u32(len);
                for u in s.encode_utf16() {
                    w.put(u.to_be_bytes());
                }
            }
            TypeRef::Sequence(inner, bound) => {
                let items = v.as_array().ok_or_else(|| self.expected("an array", v))?;
                if let Some(b) = bound {
                    if items.len() as u64 > *b {
                        return Err(self.err(format!(
                            "sequence of {} elements, its bound is {b}",
                            items.len()
                        )));
                    }
                }
                let len = u32::try_from(items.len())
                    .map_err(|_| self.err("sequence longer than 2^32 elements"))?;
                w.u32(len);
                for (i, e) in items.iter().enumerate() {
                    self.path.push(Seg::Index(i));
                    self.value(w, inner, e)?;
                    self.path.pop();
                }
            }
            TypeRef::Array(inner, dims) => self.array(w, inner, dims, v)?,
            TypeRef::Named(id) => match self.lib.get(*id) {
                TypeDef::Enum(_) => {
                    let x = self.disc_value(t, v)?;
                    w.u32(x as u32);
                }
                TypeDef::Struct(s) => {
                    let obj = v
                        .as_object()
                        .ok_or_else(|| self.expected(&format!("an object ({})", s.name), v))?;
                    for k in obj.keys() {
                        if !s.members.iter().any(|m| &m.name == k) {
                            let names: Vec<&str> =
                                s.members.iter().map(|m| m.name.as_str()).collect();
                            return Err(self.err(format!(
                                "{} has no member `{k}` (its members: {})",
                                s.name,
                                names.join(", ")
                            )));
                        }
                    }
                    for m in &s.members {
                        let mv = obj.get(&m.name);
                        self.path.push(Seg::Member(m.name.clone()));
                        if m.optional {
                            self.optional(w, &m.ty, m.id, mv.filter(|x| !x.is_null()))?;
                        } else {
                            let mv = mv.ok_or_else(|| {
                                self.err(format!("missing member (a {} needs it)", s.name))
                            })?;
                            self.value(w, &m.ty, mv)?;
                        }
                        self.path.pop();
                    }
                }
                TypeDef::Union(u) => self.union(w, u, v)?,
            },
            prim => {
                let (min, max, name) = int_range(prim).unwrap_or((0, 0, "?"));
                let x = self.int(v, min, max, name)?;
                self.put_disc(w, prim, x);
            }
        }
        Ok(())
    }

    fn array(&mut self, w: &mut Writer, inner: &TypeRef, dims: &[u64], v: &Value) -> Result<()> {
        let Some((&n, rest)) = dims.split_first() else {
            return self.value(w, inner, v);
        };
        let items = v
            .as_array()
            .ok_or_else(|| self.expected(&format!("an array of {n}"), v))?;
        if items.len() as u64 != n {
            return Err(self.err(format!(
                "array of {} elements, the type has exactly {n}",
                items.len()
            )));
        }
        for (i, e) in items.iter().enumerate() {
            self.path.push(Seg::Index(i));
            self.array(w, inner, rest, e)?;
            self.path.pop();
        }
        Ok(())
    }

    fn optional(&mut self, w: &mut Writer, t: &TypeRef, id: u32, v: Option<&Value>) -> Result<()> {
        let mut inner = Writer::new(w.endianness(), &[]);
        if let Some(v) = v {
            self.value(&mut inner, t, v)?;
        }
        let size = u32::try_from(inner.buf.len())
            .map_err(|_| self.err("optional member larger than 4 GiB"))?;
        let pid = u32::from(PID_EXTENDED | PID_FLAG_MUST_UNDERSTAND);
        let len = u32::from(EXTENDED_HEADER_LEN);
        // The two u16 of the short header, written as one aligned u32 in the stream's order
        // (as `spindle_topics::cdr::optional`).
        let short = if w.big {
            (pid << 16) | len
        } else {
            (len << 16) | pid
        };
        w.u32(short);
        w.u32(id);
        w.u32(size);
        w.buf.extend_from_slice(&inner.buf);
        Ok(())
    }

    fn union(&mut self, w: &mut Writer, u: &UnionDef, v: &Value) -> Result<()> {
        let obj = v
            .as_object()
            .ok_or_else(|| self.expected(&format!("an object ({})", u.name), v))?;
        let mut member: Option<(&BranchDef, &Value)> = None;
        for (k, mv) in obj {
            if k == "discriminator" {
                continue;
            }
            let b = u
                .branches
                .iter()
                .find(|b| &b.member.name == k)
                .ok_or_else(|| {
                    let names: Vec<&str> =
                        u.branches.iter().map(|b| b.member.name.as_str()).collect();
                    self.err(format!(
                        "{} has no member `{k}` (its members: {}; and \"discriminator\")",
                        u.name,
                        names.join(", ")
                    ))
                })?;
            if member.is_some() {
                return Err(self.err(format!("a {} holds one member, not several", u.name)));
            }
            member = Some((b, mv));
        }
        let disc = match obj.get("discriminator") {
            Some(d) => {
                self.path.push(Seg::Member("discriminator".into()));
                let x = self.disc_value(&u.disc, d)?;
                self.path.pop();
                x
            }
            None => match member {
                Some((b, _)) if !b.default && b.labels.len() == 1 => b.labels[0],
                Some((b, _)) => {
                    return Err(self.err(format!(
                    "member `{}` has several labels or is the default: give \"discriminator\" too",
                    b.member.name
                )))
                }
                None => {
                    return Err(self.err(format!(
                        "a {} needs \"discriminator\" and the member it selects",
                        u.name
                    )))
                }
            },
        };
        let selected = select_branch(u, disc);
        match (member, selected) {
            (Some((b, _)), Some(s)) if std::ptr::eq(b, s) => {}
            (Some((b, _)), Some(s)) => {
                return Err(self.err(format!(
                    "discriminator {disc} selects `{}`, not `{}`",
                    s.member.name, b.member.name
                )))
            }
            (Some((b, _)), None) => {
                return Err(self.err(format!(
                    "discriminator {disc} selects no member, but `{}` is given",
                    b.member.name
                )))
            }
            (None, Some(s)) => {
                return Err(self.err(format!(
                    "discriminator {disc} selects `{}`, which is missing",
                    s.member.name
                )))
            }
            (None, None) => {}
        }
        self.put_disc(w, &u.disc, disc);
        if let Some((b, mv)) = member {
            self.path.push(Seg::Member(b.member.name.clone()));
            self.value(w, &b.member.ty, mv)?;
            self.path.pop();
        }
        Ok(())
    }
}

/// Bytes of a primitive, discriminator or enum on the wire.
pub(crate) fn prim_len(t: &TypeRef) -> usize {
    crate::size::prim_size(t).unwrap_or(4)
}

/// The range and IDL name of an integer type (`char`, `boolean` and enums excluded).
pub(crate) fn int_range(t: &TypeRef) -> Option<(i128, i128, &'static str)> {
    Some(match t {
        TypeRef::Octet => (0, 255, "octet"),
        TypeRef::I8 => (i128::from(i8::MIN), i128::from(i8::MAX), "int8"),
        TypeRef::U8 => (0, 255, "uint8"),
        TypeRef::I16 => (i128::from(i16::MIN), i128::from(i16::MAX), "short"),
        TypeRef::U16 => (0, i128::from(u16::MAX), "unsigned short"),
        TypeRef::I32 => (i128::from(i32::MIN), i128::from(i32::MAX), "long"),
        TypeRef::U32 => (0, i128::from(u32::MAX), "unsigned long"),
        TypeRef::I64 => (i128::from(i64::MIN), i128::from(i64::MAX), "long long"),
        TypeRef::U64 => (0, i128::from(u64::MAX), "unsigned long long"),
        _ => return None,
    })
}
