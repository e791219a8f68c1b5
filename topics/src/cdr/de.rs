//! A serde deserializer for XCDR1 plain CDR over a borrowed slice. Every length read from
//! the input is checked against the bytes left before anything is allocated or copied.

use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use crate::Endianness;

/// Most elements a sequence decoder reserves room for before it has read them.
pub const SEQUENCE_PREALLOC_MAX: usize = 4096;

/// Internal decode error: what was wrong (the offset is taken from the deserializer).
#[derive(Debug)]
pub(crate) struct DeError(String);

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError(msg.to_string())
    }
}

type DResult<T> = std::result::Result<T, DeError>;

/// Reads CDR from a body (the bytes after the encapsulation header).
pub(crate) struct CdrDeserializer<'de> {
    input: &'de [u8],
    pos: usize,
    big: bool,
}

impl<'de> CdrDeserializer<'de> {
    pub(crate) fn new(input: &'de [u8], endianness: Endianness) -> Self {
        Self {
            input,
            pos: 0,
            big: endianness == Endianness::Big,
        }
    }

    /// Offset in the body where decoding stands (or failed).
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    fn take(&mut self, n: usize) -> DResult<&'de [u8]> {
        if n > self.remaining() {
            return Err(DeError(format!(
                "needs {n} more bytes, {} left",
                self.remaining()
            )));
        }
        let s = &self.input[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn align(&mut self, alignment: usize) -> DResult<()> {
        let pad = (alignment - self.pos % alignment) % alignment;
        self.take(pad).map(|_| ())
    }

    fn fixed<const N: usize>(&mut self) -> DResult<[u8; N]> {
        self.align(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        if !self.big {
            // Invariant: callers convert with from_be_bytes, so reverse little-endian input.
            a.reverse();
        }
        Ok(a)
    }

    fn read_u32(&mut self) -> DResult<u32> {
        self.fixed::<4>().map(u32::from_be_bytes)
    }

    /// A length prefix whose elements take at least one byte each: reject lengths the
    /// remaining input cannot hold before anything is allocated.
    fn read_len(&mut self, what: &str) -> DResult<usize> {
        let len = self.read_u32()? as usize;
        if len > self.remaining() {
            return Err(DeError(format!(
                "{what} length {len} exceeds the {} bytes left",
                self.remaining()
            )));
        }
        Ok(len)
    }

    fn read_str(&mut self) -> DResult<&'de str> {
        let len = self.read_len("string")?;
        if len == 0 {
            return Ok("");
        }
        let bytes = self.take(len)?;
        let (text, nul) = bytes.split_at(len - 1);
        if nul != [0] {
            return Err(DeError("string is not NUL-terminated".into()));
        }
        std::str::from_utf8(text).map_err(|e| DeError(format!("string is not UTF-8: {e}")))
    }
}

macro_rules! primitive {
    ($method:ident, $visit:ident, $t:ty, $n:literal) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
            let v = <$t>::from_be_bytes(self.fixed::<$n>()?);
            visitor.$visit(v)
        }
    };
}

impl<'de> de::Deserializer<'de> for &mut CdrDeserializer<'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> DResult<V::Value> {
        Err(DeError("CDR is not self-describing".into()))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
        match self.take(1)?[0] {
            0 => visitor.visit_bool(false),
            1 => visitor.visit_bool(true),
            b => Err(DeError(format!("boolean byte {b:#04x} is neither 0 nor 1"))),
        }
    }

    primitive!(deserialize_i8, visit_i8, i8, 1);
    primitive!(deserialize_u8, visit_u8, u8, 1);
    primitive!(deserialize_i16, visit_i16, i16, 2);
    primitive!(deserialize_u16, visit_u16, u16, 2);
    primitive!(deserialize_i32, visit_i32, i32, 4);
    primitive!(deserialize_u32, visit_u32, u32, 4);
    primitive!(deserialize_i64, visit_i64, i64, 8);
    primitive!(deserialize_u64, visit_u64, u64, 8);
    primitive!(deserialize_f32, visit_f32, f32, 4);
    primitive!(deserialize_f64, visit_f64, f64, 8);

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
        let b = self.take(1)?[0];
        if b.is_ascii() {
            visitor.visit_char(char::from(b))
        } else {
            Err(DeError(format!("char byte {b:#04x} is not ASCII")))
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
        visitor.visit_borrowed_str(self.read_str()?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
        let len = self.read_len("sequence<octet>")?;
        visitor.visit_borrowed_bytes(self.take(len)?)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, _visitor: V) -> DResult<V::Value> {
        Err(DeError(
            "optional members are not supported in XCDR1 plain CDR".into(),
        ))
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> DResult<V::Value> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> DResult<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> DResult<V::Value> {
        // Every CDR element takes at least one byte (IDL has no empty members on the wire
        // that a sequence could repeat for free), so the length is bounded by the input.
        let len = self.read_len("sequence")?;
        visitor.visit_seq(Access {
            de: self,
            left: len,
        })
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> DResult<V::Value> {
        visitor.visit_seq(Access {
            de: self,
            left: len,
        })
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        visitor: V,
    ) -> DResult<V::Value> {
        self.deserialize_tuple(len, visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, _visitor: V) -> DResult<V::Value> {
        Err(DeError("maps are not supported".into()))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> DResult<V::Value> {
        self.deserialize_tuple(fields.len(), visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> DResult<V::Value> {
        visitor.visit_enum(self)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _visitor: V) -> DResult<V::Value> {
        Err(DeError("identifiers are not encoded in CDR".into()))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _visitor: V) -> DResult<V::Value> {
        Err(DeError("CDR cannot skip a value of unknown type".into()))
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// Sequence, tuple and struct elements.
struct Access<'a, 'de> {
    de: &'a mut CdrDeserializer<'de>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Access<'_, 'de> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> DResult<Option<T::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left.min(SEQUENCE_PREALLOC_MAX))
    }
}

/// Plain serde enums (declaration index as a u32), for types that do not use
/// [`IdlEnum`](super::IdlEnum).
impl<'de> de::EnumAccess<'de> for &mut CdrDeserializer<'de> {
    type Error = DeError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> DResult<(V::Value, Self)> {
        let idx = self.read_u32()?;
        let v = seed.deserialize(idx.into_deserializer())?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut CdrDeserializer<'de> {
    type Error = DeError;

    fn unit_variant(self) -> DResult<()> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> DResult<T::Value> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> DResult<V::Value> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> DResult<V::Value> {
        de::Deserializer::deserialize_tuple(self, fields.len(), visitor)
    }
}
