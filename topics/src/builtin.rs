//! Built-in topic types, written by hand in exactly the shape `spindle-idl` generates.

use serde::{Deserialize, Serialize};

use crate::cdr::{self, CheckBounds};
use crate::{Endianness, KeyHash, Result, TopicType};

/// The Spindle paper's benchmark type: an opaque byte payload, keyless.
///
/// IDL: `module Spindle { struct Sequence { sequence<octet> payload; }; };`
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Sequence {
    /// The payload bytes.
    #[serde(with = "crate::cdr::octets")]
    pub payload: Vec<u8>,
}

impl CheckBounds for Sequence {
    fn check_bounds(&self) -> Result<()> {
        Ok(())
    }
}

impl TopicType for Sequence {
    const TYPE_NAME: &'static str = "Spindle::Sequence";
    const HAS_KEY: bool = false;
    const MAX_SERIALIZED_SIZE: Option<usize> = None;
    const KEY_MAX_SERIALIZED_SIZE: Option<usize> = Some(0);
    const IDL_SOURCE: Option<&'static str> =
        Some("module Spindle { struct Sequence { sequence<octet> payload; }; };");

    // The benchmark's type: its one member is copied straight (the same bytes as the
    // serde path, which cost more than the copy itself per 1 KiB sample).
    fn encode_into(&self, endianness: Endianness, buf: &mut [u8]) -> Result<usize> {
        cdr::encode_octets_into(&self.payload, endianness, buf)
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(Sequence {
            payload: cdr::decode_octets(bytes, Self::TYPE_NAME)?,
        })
    }

    // Overwrites the payload in its own buffer: no allocation once it has grown.
    fn decode_in_place(&mut self, bytes: &[u8], _key_hash: &KeyHash) -> Result<()> {
        cdr::decode_octets_into(bytes, Self::TYPE_NAME, &mut self.payload)
    }

    fn encode_key_be(&self, _out: &mut Vec<u8>) -> Result<()> {
        Ok(())
    }
}

/// A keyed string, the DDS-XTypes built-in `DDS::KeyedString`.
///
/// IDL: `module DDS { struct KeyedString { @key string key; string value; }; };`
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KeyedString {
    /// The instance key.
    pub key: String,
    /// The value.
    pub value: String,
}

impl CheckBounds for KeyedString {
    fn check_bounds(&self) -> Result<()> {
        Ok(())
    }
}

impl TopicType for KeyedString {
    const TYPE_NAME: &'static str = "DDS::KeyedString";
    const HAS_KEY: bool = true;
    const MAX_SERIALIZED_SIZE: Option<usize> = None;
    const KEY_MAX_SERIALIZED_SIZE: Option<usize> = None;
    const IDL_SOURCE: Option<&'static str> =
        Some("module DDS { struct KeyedString { @key string key; string value; }; };");

    fn encode_into(&self, endianness: Endianness, buf: &mut [u8]) -> Result<usize> {
        cdr::encode_into(self, endianness, buf)
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        cdr::decode(bytes)
    }

    fn encode_key_be(&self, out: &mut Vec<u8>) -> Result<()> {
        cdr::encode_key_be(&(&self.key,), out)
    }
}

pub mod examples {
    //! Hand-written reference for generated code: an enum with explicit values, a union
    //! with a typed discriminator and a default branch, and a keyed struct with bounded
    //! members, a nested struct, an array and the union. The cross-check test compares
    //! their bytes with Cyclone DDS.
    //!
    //! ```idl
    //! module Example {
    //!   enum Color { RED, GREEN, @value(7) BLUE };
    //!   const long NAME_MAX = 8;
    //!   union Reading switch (short) {
    //!     case 1: long count;
    //!     case 2: case 3: double level;
    //!     case 4: string<NAME_MAX> note;
    //!     default: octet raw;
    //!   };
    //!   struct Point { short x; long long y; };
    //!   struct Sample {
    //!     @key unsigned long id;
    //!     @key char tag;
    //!     string<NAME_MAX> name;
    //!     Color color;
    //!     Point origin;
    //!     double coords[3];
    //!     sequence<Point, 4> path;
    //!     Reading reading;
    //!     boolean ok;
    //!   };
    //!   struct Extras {
    //!     octet head;
    //!     @optional long a;
    //!     @optional string<4> b;
    //!     @optional double c;
    //!     octet tail;
    //!   };
    //! };
    //! ```

    use serde::de::SeqAccess;
    use serde::ser::SerializeTuple;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::cdr::{self, CheckBounds, IdlEnum, IdlUnion};
    use crate::{Endianness, Result, TopicType};

    /// IDL `const long NAME_MAX = 8;`
    pub const NAME_MAX: i32 = 8;

    /// IDL `enum Color { RED, GREEN, @value(7) BLUE };`
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub enum Color {
        /// `RED` = 0.
        #[default]
        Red,
        /// `GREEN` = 1.
        Green,
        /// `BLUE` = 7.
        Blue,
    }

    impl IdlEnum for Color {
        const IDL_NAME: &'static str = "Example::Color";
        fn value(self) -> u32 {
            match self {
                Color::Red => 0,
                Color::Green => 1,
                Color::Blue => 7,
            }
        }
        fn from_value(value: u32) -> Option<Self> {
            match value {
                0 => Some(Color::Red),
                1 => Some(Color::Green),
                7 => Some(Color::Blue),
                _ => None,
            }
        }
    }

    impl Serialize for Color {
        fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
            cdr::serialize_enum(self, s)
        }
    }

    impl<'de> Deserialize<'de> for Color {
        fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            cdr::deserialize_enum(d)
        }
    }

    impl CheckBounds for Color {
        fn check_bounds(&self) -> Result<()> {
            Ok(())
        }
    }

    /// IDL `union Reading switch (short)`. A branch with one label holds just the member;
    /// a branch with several labels, or the default branch, also holds the discriminator.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Reading {
        /// `case 1: long count;`
        Count(i32),
        /// `case 2: case 3: double level;` (discriminator 2 or 3)
        Level(i16, f64),
        /// `case 4: string<NAME_MAX> note;`
        Note(String),
        /// `default: octet raw;` (any discriminator not named above)
        Raw(i16, u8),
    }

    impl Default for Reading {
        fn default() -> Self {
            Reading::Count(0)
        }
    }

    impl IdlUnion for Reading {
        const IDL_NAME: &'static str = "Example::Reading";
        type Discriminator = i16;

        fn discriminator(&self) -> i16 {
            match self {
                Reading::Count(_) => 1,
                Reading::Level(d, _) => *d,
                Reading::Note(_) => 4,
                Reading::Raw(d, _) => *d,
            }
        }

        fn serialize_member<T: SerializeTuple>(
            &self,
            t: &mut T,
        ) -> std::result::Result<(), T::Error> {
            match self {
                Reading::Count(v) => t.serialize_element(v),
                Reading::Level(_, v) => t.serialize_element(v),
                Reading::Note(v) => t.serialize_element(v),
                Reading::Raw(_, v) => t.serialize_element(v),
            }
        }

        fn deserialize_member<'de, A: SeqAccess<'de>>(
            discriminator: i16,
            seq: &mut A,
        ) -> std::result::Result<Self, A::Error> {
            Ok(match discriminator {
                1 => Reading::Count(cdr::union_member(seq, Self::IDL_NAME)?),
                2 | 3 => Reading::Level(discriminator, cdr::union_member(seq, Self::IDL_NAME)?),
                4 => Reading::Note(cdr::union_member(seq, Self::IDL_NAME)?),
                d => Reading::Raw(d, cdr::union_member(seq, Self::IDL_NAME)?),
            })
        }
    }

    impl Serialize for Reading {
        fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
            cdr::serialize_union(self, s)
        }
    }

    impl<'de> Deserialize<'de> for Reading {
        fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            cdr::deserialize_union(d)
        }
    }

    impl Reading {
        /// Worst-case size after the union, starting from `s` (see [`cdr::MaxSize`]).
        pub const fn max_size_from(s: cdr::MaxSize) -> cdr::MaxSize {
            let d = s.primitive(2);
            d.primitive(4)
                .either(d.primitive(8))
                .either(d.string(8))
                .either(d.primitive(1))
        }
    }

    impl CheckBounds for Reading {
        fn check_bounds(&self) -> Result<()> {
            match self {
                // A default-branch discriminator must not collide with a named label.
                Reading::Level(d, _) if !matches!(d, 2 | 3) => Err(crate::Error::InvalidValue {
                    field: "Example::Reading",
                    detail: format!("discriminator {d} does not select `level`"),
                }),
                Reading::Raw(d, _) if matches!(d, 1..=4) => Err(crate::Error::InvalidValue {
                    field: "Example::Reading",
                    detail: format!("discriminator {d} does not select the default branch"),
                }),
                Reading::Note(v) => cdr::check_len("Example::Reading::note", v.len(), 8),
                _ => Ok(()),
            }
        }
    }

    /// IDL `struct Point { short x; long long y; };`
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    pub struct Point {
        /// `x`
        pub x: i16,
        /// `y`
        pub y: i64,
    }

    impl Point {
        /// Worst-case size after a `Point`, starting from `s` (see [`cdr::MaxSize`]).
        pub const fn max_size_from(s: cdr::MaxSize) -> cdr::MaxSize {
            s.primitive(2).primitive(8)
        }
    }

    impl CheckBounds for Point {
        fn check_bounds(&self) -> Result<()> {
            Ok(())
        }
    }

    /// IDL `struct Sample` (keys: `id`, `tag`).
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct Sample {
        /// `@key unsigned long id`
        pub id: u32,
        /// `@key char tag`
        pub tag: char,
        /// `string<NAME_MAX> name`
        pub name: String,
        /// `Color color`
        pub color: Color,
        /// `Point origin`
        pub origin: Point,
        /// `double coords[3]`
        pub coords: [f64; 3],
        /// `sequence<Point, 4> path`
        pub path: Vec<Point>,
        /// `Reading reading`
        pub reading: Reading,
        /// `boolean ok`
        pub ok: bool,
    }

    impl Sample {
        /// Worst-case size after a `Sample`, starting from `s` (see [`cdr::MaxSize`]).
        pub const fn max_size_from(s: cdr::MaxSize) -> cdr::MaxSize {
            let s = s
                .primitive(4)
                .primitive(1)
                .string(NAME_MAX as usize)
                .primitive(4);
            let s = Point::max_size_from(s).primitive_array(8, 3);
            // sequence<Point, 4>: the length, then 0..=4 elements.
            let mut cur = s.primitive(4);
            let mut path = cur;
            let mut i = 0;
            while i < 4 {
                cur = Point::max_size_from(cur);
                path = path.either(cur);
                i += 1;
            }
            Reading::max_size_from(path).primitive(1)
        }

        /// Worst-case size of the key members `id`, `tag`.
        pub const fn key_max_size_from(s: cdr::MaxSize) -> cdr::MaxSize {
            s.primitive(4).primitive(1)
        }
    }

    impl CheckBounds for Sample {
        fn check_bounds(&self) -> Result<()> {
            cdr::check_len("Example::Sample::name", self.name.len(), NAME_MAX as usize)?;
            cdr::check_len("Example::Sample::path", self.path.len(), 4)?;
            self.origin.check_bounds()?;
            self.path.check_bounds()?;
            self.reading.check_bounds()
        }
    }

    impl TopicType for Sample {
        const TYPE_NAME: &'static str = "Example::Sample";
        const HAS_KEY: bool = true;
        // Body offsets at the maximum: id 0..4, tag 4, name 8..21 (4 + 8 + NUL), color
        // 24..28, origin 28..40, coords 40..64, path 64..128 (4 + 4 points of 2+6 pad+8),
        // reading 128..145 (short, pad, string<8>), ok 145: 146 bytes + 4 header.
        const MAX_SERIALIZED_SIZE: Option<usize> =
            Some(Sample::max_size_from(cdr::MaxSize::start()).encoded());
        // id (4) + tag (1).
        const KEY_MAX_SERIALIZED_SIZE: Option<usize> =
            Some(Sample::key_max_size_from(cdr::MaxSize::start()).size());

        fn encode_into(&self, endianness: Endianness, buf: &mut [u8]) -> Result<usize> {
            self.check_bounds()?;
            cdr::encode_into(self, endianness, buf)
        }

        fn decode(bytes: &[u8]) -> Result<Self> {
            let v: Self = cdr::decode(bytes)?;
            v.check_bounds()?;
            Ok(v)
        }

        fn encode_key_be(&self, out: &mut Vec<u8>) -> Result<()> {
            cdr::encode_key_be(&(&self.id, &self.tag), out)
        }
    }

    /// IDL `struct Extras` (keyless, with `@optional` members; member ids are positions).
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct Extras {
        /// `octet head`
        pub head: u8,
        /// `@optional long a` (member id 1)
        #[serde(
            serialize_with = "cdr::optional::serialize::<_, _, 1>",
            deserialize_with = "cdr::optional::deserialize::<_, _, 1>"
        )]
        pub a: Option<i32>,
        /// `@optional string<4> b` (member id 2)
        #[serde(
            serialize_with = "cdr::optional::serialize::<_, _, 2>",
            deserialize_with = "cdr::optional::deserialize::<_, _, 2>"
        )]
        pub b: Option<String>,
        /// `@optional double c` (member id 3)
        #[serde(
            serialize_with = "cdr::optional::serialize::<_, _, 3>",
            deserialize_with = "cdr::optional::deserialize::<_, _, 3>"
        )]
        pub c: Option<f64>,
        /// `octet tail`
        pub tail: u8,
    }

    impl Extras {
        /// Worst-case size after an `Extras`, starting from `s` (see [`cdr::MaxSize`]).
        pub const fn max_size_from(s: cdr::MaxSize) -> cdr::MaxSize {
            let start = cdr::MaxSize::start();
            s.primitive(1)
                .optional(start.primitive(4).size())
                .optional(start.string(4).size())
                .optional(start.primitive(8).size())
                .primitive(1)
        }
    }

    impl CheckBounds for Extras {
        fn check_bounds(&self) -> Result<()> {
            match &self.b {
                Some(b) => cdr::check_len("Example::Extras::b", b.len(), 4),
                None => Ok(()),
            }
        }
    }

    impl TopicType for Extras {
        const TYPE_NAME: &'static str = "Example::Extras";
        const HAS_KEY: bool = false;
        const MAX_SERIALIZED_SIZE: Option<usize> =
            Some(Extras::max_size_from(cdr::MaxSize::start()).encoded());
        const KEY_MAX_SERIALIZED_SIZE: Option<usize> = Some(0);

        fn encode_into(&self, endianness: Endianness, buf: &mut [u8]) -> Result<usize> {
            self.check_bounds()?;
            cdr::encode_into(self, endianness, buf)
        }

        fn decode(bytes: &[u8]) -> Result<Self> {
            let v: Self = cdr::decode(bytes)?;
            v.check_bounds()?;
            Ok(v)
        }

        fn encode_key_be(&self, _out: &mut Vec<u8>) -> Result<()> {
            Ok(())
        }
    }
}
