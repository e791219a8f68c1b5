//! The RTPS side: RustDDS readers and writers of undecoded CDR.
//!
//! RustDDS readers and writers are typed by a value and a (de)serializer adapter. The
//! bridge's value is [`RawSample`] (the encapsulation's representation id, the CDR body
//! and, on keyed topics, the [`RawKey`]) and its adapter is [`RawCdr`], which copies bytes
//! and never decodes them. The key is found by the topic's [`KeyLayout`]: RustDDS asks
//! the adapter for a sample's key while the reading thread takes it, so each RTPS reader
//! of the bridge is taken on a thread that has set its layout ([`with_key_layout`]).

use std::cell::RefCell;
use std::net::IpAddr;

use rustdds::dds::adapters::{no_key, with_key};
use rustdds::policy::{Durability, History, Reliability, ResourceLimits};
use rustdds::{
    DomainParticipant, DomainParticipantBuilder, Key, Keyed, QosPolicies, QosPolicyBuilder,
    RepresentationIdentifier, Timestamp,
};
use spindle_topics::KeyHash;

use crate::config::{DurabilityKind, ReliabilityKind, TopicConfig};
use crate::error::{Error, Result};
use crate::keys::KeyLayout;

/// How long a reliable RTPS write may block on a full send window before it fails.
pub const RTPS_MAX_BLOCKING_MS: u64 = 5_000;

/// Defined beside the setting it is the default of (`config` does not depend on `rtps`).
pub use crate::config::RTPS_READER_SAMPLES_MAX;

/// An undecoded sample on the RTPS side.
///
/// It holds the whole encapsulated encoding (what Spindle carries), so a sample taken
/// from RTPS is copied once, out of RustDDS's receive buffer, and moved into Spindle's
/// `CdrSample` (it used to be copied a second time to put the header back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSample {
    /// CDR_LE or CDR_BE.
    pub encoding: RepresentationIdentifier,
    /// The 4-byte encapsulation header (`encoding`, options zero), then the CDR body.
    encapsulated: Vec<u8>,
    /// Its key (zero hash on keyless topics).
    pub key: RawKey,
}

impl RawSample {
    /// A sample of `body` (the CDR after the encapsulation header) in `encoding`.
    pub fn new(encoding: RepresentationIdentifier, body: &[u8], key: RawKey) -> RawSample {
        let mut encapsulated = Vec::with_capacity(4 + body.len());
        encapsulated.extend_from_slice(&encoding.to_bytes());
        encapsulated.extend_from_slice(&[0, 0]);
        encapsulated.extend_from_slice(body);
        RawSample {
            encoding,
            encapsulated,
            key,
        }
    }

    /// The CDR body (after the 4-byte encapsulation header).
    pub fn body(&self) -> &[u8] {
        // `new` always writes the 4 header bytes.
        self.encapsulated.get(4..).unwrap_or_default()
    }

    /// The encoding with its 4-byte encapsulation header (what Spindle carries).
    pub fn encapsulated(&self) -> &[u8] {
        &self.encapsulated
    }

    /// The encoding with its 4-byte encapsulation header, without a copy.
    pub fn into_encapsulated(self) -> Vec<u8> {
        self.encapsulated
    }

    /// Splits an encapsulated CDR encoding (CDR_LE or CDR_BE; the options are dropped).
    pub fn from_encapsulated(
        bytes: &[u8],
        key: RawKey,
    ) -> std::result::Result<RawSample, RawCdrError> {
        let (head, body) = split_header(bytes)?;
        Ok(RawSample::new(head, body, key))
    }
}

/// Splits the 4-byte encapsulation header: CDR_LE or CDR_BE only.
pub fn split_header(
    bytes: &[u8],
) -> std::result::Result<(RepresentationIdentifier, &[u8]), RawCdrError> {
    if bytes.len() < 4 {
        return Err(RawCdrError(format!(
            "{} bytes: shorter than the encapsulation header",
            bytes.len()
        )));
    }
    let rep = RepresentationIdentifier::from_bytes(&bytes[..2])
        .map_err(|e| RawCdrError(format!("encapsulation header: {e}")))?;
    if rep != RepresentationIdentifier::CDR_LE && rep != RepresentationIdentifier::CDR_BE {
        return Err(RawCdrError(format!(
            "encapsulation {:02x?}: only plain CDR (XCDR1) is forwarded",
            rep.to_bytes()
        )));
    }
    Ok((rep, &bytes[4..]))
}

/// An instance key as the bridge knows it: the key hash and the key-only serialization.
#[derive(Debug, Clone, Default)]
pub struct RawKey {
    /// The RTPS key hash (Spindle's too).
    pub hash: [u8; 16],
    /// The key members' serialization (the body's leading bytes), little-endian when
    /// `little`.
    pub serialized: Vec<u8>,
    /// Byte order of `serialized`.
    pub little: bool,
}

impl RawKey {
    /// The key of a sample body, by `layout`.
    pub fn extract(
        layout: &KeyLayout,
        body: &[u8],
        little: bool,
    ) -> std::result::Result<RawKey, RawCdrError> {
        let k = layout.extract(body, little).map_err(RawCdrError)?;
        Ok(RawKey {
            hash: k.hash.0,
            serialized: k.key_only,
            little,
        })
    }

    /// The key of a key-only serialization (an RTPS dispose or unregister), by `layout`.
    pub fn extract_key_only(
        layout: &KeyLayout,
        bytes: &[u8],
        little: bool,
    ) -> std::result::Result<RawKey, RawCdrError> {
        let k = layout
            .extract_key_only(bytes, little)
            .map_err(RawCdrError)?;
        Ok(RawKey {
            hash: k.hash.0,
            serialized: k.key_only,
            little,
        })
    }

    /// As Spindle's key hash.
    pub fn key_hash(&self) -> KeyHash {
        KeyHash(self.hash)
    }
}

// An instance is its hash: the serialization is carried along for dispose messages.
impl PartialEq for RawKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
    }
}
impl Eq for RawKey {}
impl PartialOrd for RawKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for RawKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.hash.cmp(&other.hash)
    }
}
impl std::hash::Hash for RawKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.hash.hash(state)
    }
}
impl serde::Serialize for RawKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.hash)
    }
}
impl rustdds::cdr_encoding_size::CdrEncodingSize for RawKey {
    fn cdr_encoding_max_size() -> rustdds::cdr_encoding_size::CdrEncodingMaxSize {
        rustdds::cdr_encoding_size::CdrEncodingMaxSize::Unbounded
    }
}
impl Key for RawKey {
    fn hash_key(&self, _force_md5: bool) -> rustdds::dds::key::KeyHash {
        // The hash was computed by the layout exactly as RTPS 9.6.3.8 says; no re-encoding.
        keyhash_from(self.hash)
    }
}

fn keyhash_from(hash: [u8; 16]) -> rustdds::dds::key::KeyHash {
    // KeyHash has no public constructor from bytes other than the PL_CDR one, which
    // accepts exactly 16 bytes.
    rustdds::dds::key::KeyHash::from_pl_cdr_bytes(hash.to_vec())
        .unwrap_or_else(|_| rustdds::dds::key::KeyHash::zero())
}

impl Keyed for RawSample {
    type K = RawKey;
    fn key(&self) -> RawKey {
        self.key.clone()
    }
}

/// Why a sample could not be passed through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("raw CDR: {0}")]
pub struct RawCdrError(pub String);

thread_local! {
    static KEY_LAYOUT: RefCell<Option<KeyLayout>> = const { RefCell::new(None) };
}

/// Runs `f` with `layout` as the key layout RustDDS's decoding uses on this thread.
pub fn with_key_layout<R>(layout: Option<&KeyLayout>, f: impl FnOnce() -> R) -> R {
    let old = KEY_LAYOUT.with(|l| l.replace(layout.cloned()));
    let r = f();
    KEY_LAYOUT.with(|l| *l.borrow_mut() = old);
    r
}

fn is_little(encoding: RepresentationIdentifier) -> bool {
    encoding == RepresentationIdentifier::CDR_LE
}

fn key_of(
    body: &[u8],
    encoding: RepresentationIdentifier,
) -> std::result::Result<RawKey, RawCdrError> {
    KEY_LAYOUT.with(|l| match l.borrow().as_ref() {
        Some(layout) => RawKey::extract(layout, body, is_little(encoding)),
        None => Ok(RawKey::default()),
    })
}

fn key_of_key_only(
    bytes: &[u8],
    encoding: RepresentationIdentifier,
) -> std::result::Result<RawKey, RawCdrError> {
    KEY_LAYOUT.with(|l| match l.borrow().as_ref() {
        Some(layout) => RawKey::extract_key_only(layout, bytes, is_little(encoding)),
        None => Ok(RawKey::default()),
    })
}

/// The pass-through (de)serializer adapter: bytes in, bytes out.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCdr;

const ENCODINGS: [RepresentationIdentifier; 2] = [
    RepresentationIdentifier::CDR_LE,
    RepresentationIdentifier::CDR_BE,
];

impl no_key::DeserializerAdapter<RawSample> for RawCdr {
    type Error = RawCdrError;
    type Decoded = RawSample;
    fn supported_encodings() -> &'static [RepresentationIdentifier] {
        &ENCODINGS
    }
    fn transform_decoded(decoded: RawSample) -> RawSample {
        decoded
    }
}

impl with_key::DeserializerAdapter<RawSample> for RawCdr {
    type DecodedKey = RawKey;
    fn transform_decoded_key(decoded_key: RawKey) -> RawKey {
        decoded_key
    }
}

impl<'de> no_key::Decode<'de, RawSample> for RawCdr {
    type Error = RawCdrError;
    fn decode_bytes(
        self,
        input_bytes: &'de [u8],
        encoding: RepresentationIdentifier,
    ) -> std::result::Result<RawSample, RawCdrError> {
        let key = key_of(input_bytes, encoding)?;
        Ok(RawSample::new(encoding, input_bytes, key))
    }
}

impl<'de> with_key::Decode<'de, RawSample, RawKey> for RawCdr {
    fn decode_key_bytes(
        self,
        input_key_bytes: &'de [u8],
        encoding: RepresentationIdentifier,
    ) -> std::result::Result<RawKey, RawCdrError> {
        key_of_key_only(input_key_bytes, encoding)
    }
}

impl no_key::DefaultDecoder<RawSample> for RawCdr {
    type Decoder = RawCdr;
    const DECODER: RawCdr = RawCdr;
}

impl with_key::DefaultDecoder<RawSample> for RawCdr {
    type Decoder = RawCdr;
    const DECODER: RawCdr = RawCdr;
}

impl no_key::SerializerAdapter<RawSample> for RawCdr {
    type Error = RawCdrError;
    fn output_encoding() -> RepresentationIdentifier {
        RepresentationIdentifier::CDR_LE
    }
    fn to_bytes(value: &RawSample) -> std::result::Result<rustdds::bytes::Bytes, RawCdrError> {
        // The writer's encoding is fixed per adapter: little-endian, Spindle's default.
        if value.encoding != RepresentationIdentifier::CDR_LE {
            return Err(RawCdrError(
                "a big-endian sample cannot go out on the bridge's CDR_LE writer".into(),
            ));
        }
        Ok(rustdds::bytes::Bytes::copy_from_slice(value.body()))
    }
}

impl with_key::SerializerAdapter<RawSample> for RawCdr {
    fn key_to_bytes(value: &RawKey) -> std::result::Result<rustdds::bytes::Bytes, RawCdrError> {
        if !value.little || value.serialized.is_empty() {
            return Err(RawCdrError(
                "no little-endian key serialization known for this instance".into(),
            ));
        }
        Ok(rustdds::bytes::Bytes::copy_from_slice(&value.serialized))
    }
}

/// A RustDDS participant restricted to `only_networks` (when given).
pub fn participant(domain_id: u16, only_networks: Option<&[IpAddr]>) -> Result<DomainParticipant> {
    let mut b = DomainParticipantBuilder::new(domain_id);
    if let Some(nets) = only_networks {
        b = b.with_only_networks(nets.iter().copied());
    }
    b.build()
        .map_err(|e| Error::Rtps(format!("participant in domain {domain_id}: {e:?}")))
}

/// The RTPS QoS of a bridged topic, for its writer (and the topic in the writers'
/// participant): RESOURCE_LIMITS [`RTPS_READER_SAMPLES_MAX`], the writer's window.
pub fn qos_of(topic: &TopicConfig) -> QosPolicies {
    let reliability = match topic.reliability {
        ReliabilityKind::Reliable => Reliability::Reliable {
            max_blocking_time: rustdds::Duration::from_millis(RTPS_MAX_BLOCKING_MS as i64),
        },
        ReliabilityKind::BestEffort => Reliability::BestEffort,
    };
    let durability = match topic.durability {
        DurabilityKind::Volatile => Durability::Volatile,
        DurabilityKind::TransientLocal => Durability::TransientLocal,
    };
    let history = if topic.history_depth == 0 {
        History::KeepAll
    } else {
        History::KeepLast {
            depth: topic.history_depth,
        }
    };
    QosPolicyBuilder::new()
        .reliability(reliability)
        .durability(durability)
        .history(history)
        .resource_limits(ResourceLimits {
            max_samples: RTPS_READER_SAMPLES_MAX,
            max_instances: RTPS_READER_SAMPLES_MAX,
            max_samples_per_instance: RTPS_READER_SAMPLES_MAX,
        })
        .build()
}

/// The RTPS QoS of a bridge's reader of `topic`: [`qos_of`], but KEEP_ALL whatever the
/// topic's depth. History is not matched between RTPS endpoints, and RustDDS's reader
/// applies a KEEP_LAST depth to the samples it has not yet handed over: a writer that
/// outran the bridge by more than the depth per instance lost samples the reader had
/// already acknowledged. The depth stays on the bridge's writers (their TRANSIENT_LOCAL
/// history).
///
/// RESOURCE_LIMITS are the topic's [`TopicConfig::rtps_reader_samples`]. RustDDS 0.15 keeps a
/// participant's samples of a topic in one cache whose limit is the largest of those of
/// the topic and the readers created there, so the topic in the readers' participant must
/// be created with this QoS too, or a limit below the topic's would not hold.
pub fn reader_qos_of(topic: &TopicConfig) -> QosPolicies {
    let limit = topic.rtps_reader_samples();
    qos_of(topic).modify_by(
        &QosPolicyBuilder::new()
            .history(History::KeepAll)
            .resource_limits(ResourceLimits {
                max_samples: limit,
                max_instances: limit,
                max_samples_per_instance: limit,
            })
            .build(),
    )
}

/// RTPS time (seconds and 2^-32 fractions since the Unix epoch) → nanoseconds.
pub fn timestamp_to_ns(t: Timestamp) -> u64 {
    let ticks = t.to_ticks();
    let secs = ticks >> 32;
    let frac = ticks & 0xffff_ffff;
    secs.saturating_mul(1_000_000_000)
        .saturating_add((frac * 1_000_000_000) >> 32)
}

/// Nanoseconds since the Unix epoch → RTPS time.
pub fn timestamp_from_ns(ns: u64) -> Timestamp {
    let secs = (ns / 1_000_000_000).min(u32::MAX as u64 - 1);
    let frac = ((ns % 1_000_000_000) << 32) / 1_000_000_000;
    Timestamp::from_ticks((secs << 32) | frac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustdds::dds::adapters::no_key::{DeserializerAdapter, SerializerAdapter};
    use spindle_topics::{Endianness, KeyedString, TopicType};

    #[test]
    fn a_sample_passes_through_byte_for_byte_with_spindles_key_hash() {
        let v = KeyedString {
            key: "k-1".into(),
            value: "payload bytes".into(),
        };
        let bytes = v.encode(Endianness::Little).unwrap();
        let layout = KeyLayout::parse(&["string".to_string()]).unwrap();
        let got = with_key_layout(Some(&layout), || {
            <RawCdr as DeserializerAdapter<RawSample>>::from_bytes(
                &bytes[4..],
                RepresentationIdentifier::CDR_LE,
            )
        })
        .unwrap();
        assert_eq!(got.key.key_hash(), v.key_hash().unwrap());
        assert_eq!(got.encapsulated(), &bytes[..]);
        let out = <RawCdr as SerializerAdapter<RawSample>>::to_bytes(&got).unwrap();
        assert_eq!(&out[..], &bytes[4..]);
        let k = <RawCdr as with_key::SerializerAdapter<RawSample>>::key_to_bytes(&got.key).unwrap();
        assert_eq!(&k[..], &bytes[4..4 + 4 + 4]);
        assert_eq!(
            got.key.hash_key(false).to_vec(),
            v.key_hash().unwrap().0.to_vec()
        );
    }

    #[test]
    fn bad_headers_and_short_keys_are_errors() {
        assert!(split_header(&[0, 1]).is_err());
        assert!(split_header(&[0, 2, 0, 0]).is_err()); // PL_CDR_BE
        let layout = KeyLayout::parse(&["int64".to_string()]).unwrap();
        let r = with_key_layout(Some(&layout), || {
            <RawCdr as DeserializerAdapter<RawSample>>::from_bytes(
                &[1, 2, 3],
                RepresentationIdentifier::CDR_LE,
            )
        });
        assert!(r.is_err());
    }

    #[test]
    fn timestamps_convert_both_ways() {
        for ns in [0u64, 1, 999_999_999, 1_764_000_000_123_456_789] {
            let back = timestamp_to_ns(timestamp_from_ns(ns));
            assert!(back.abs_diff(ns) <= 1, "{ns} -> {back}");
        }
    }

    #[test]
    fn the_reader_holds_its_topics_limit_and_the_writer_the_default() {
        let topic = TopicConfig {
            name: "T".into(),
            type_name: "M::T".into(),
            key: None,
            direction: crate::config::Direction::Both,
            reliability: ReliabilityKind::Reliable,
            durability: DurabilityKind::Volatile,
            history_depth: 10,
            rtps_reader_samples_max: 1 << 22,
        };
        let r = reader_qos_of(&topic);
        assert_eq!(r.resource_limits().map(|l| l.max_samples), Some(1 << 22));
        assert_eq!(r.history(), Some(History::KeepAll));
        let w = qos_of(&topic);
        assert_eq!(
            w.resource_limits().map(|l| l.max_samples),
            Some(RTPS_READER_SAMPLES_MAX)
        );
        assert_eq!(w.history(), Some(History::KeepLast { depth: 10 }));
    }
}
