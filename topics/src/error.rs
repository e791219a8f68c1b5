//! The crate's one error enum.

/// Everything that can go wrong encoding or decoding a topic type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The caller's buffer cannot hold the encoding; retry with at least `needed` bytes.
    #[error("buffer too small: {needed} bytes needed, {available} available")]
    BufferTooSmall {
        /// Bytes the complete encoding needs (header included).
        needed: usize,
        /// Bytes the caller's buffer has.
        available: usize,
    },
    /// A bounded string or sequence holds more than its IDL bound allows.
    #[error("field `{field}` has {len} elements, its bound is {max}")]
    BoundExceeded {
        /// IDL name of the member (or type) whose bound is exceeded.
        field: &'static str,
        /// Actual length (characters for strings, elements for sequences).
        len: usize,
        /// The IDL bound.
        max: usize,
    },
    /// The bytes are not a valid encoding of the type: reject the sample.
    #[error("cannot decode {type_name} at byte {offset}: {detail}")]
    Decode {
        /// Rust or IDL name of the type being decoded.
        type_name: &'static str,
        /// Offset in the input (header included) where decoding failed.
        offset: usize,
        /// What was wrong.
        detail: String,
    },
    /// The encapsulation identifier is not CDR_BE (`00 00`) or CDR_LE (`00 01`).
    #[error("unsupported encapsulation {found:02x?} (expected 00 00 or 00 01)")]
    BadEncapsulation {
        /// The two identifier bytes found (or fewer bytes, zero filled, when input is short).
        found: [u8; 2],
    },
    /// A value has no encoding: bad enum value, bad union discriminator, char out of range.
    #[error("invalid value for `{field}`: {detail}")]
    InvalidValue {
        /// The member or type concerned.
        field: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The serializer rejected the value for a reason not covered above.
    #[error("cannot encode {type_name}: {detail}")]
    Encode {
        /// Rust name of the type being encoded.
        type_name: &'static str,
        /// What the serializer reported.
        detail: String,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
