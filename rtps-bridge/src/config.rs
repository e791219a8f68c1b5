//! The bridge's configuration: a TOML file naming the two sides and the topics to forward.
//!
//! ```toml
//! [rtps]
//! domain_id = 7                  # the RTPS (RustDDS, Cyclone, …) domain
//! only_networks = ["127.0.0.1"]  # interfaces used for multicast and advertised locators
//!
//! [spindle]
//! config = "participant.toml"    # a Spindle ParticipantConfig file (relative to this file);
//!                                # the SPINDLE_* environment overrides apply to it
//!
//! [[topic]]
//! name = "Telemetry"
//! type_name = "Interop::Reading"
//! keyed = true
//! key = ["string"]               # the struct's leading members that form its key, in order
//!                                # ("skip uint32": a leading member not in the key)
//! direction = "both"             # "both", "rtps_to_spindle" or "spindle_to_rtps"
//! reliability = "reliable"       # or "best_effort"
//! durability = "volatile"        # or "transient_local"
//! history_depth = 1000           # KEEP_LAST depth on the RTPS side; 0 = KEEP_ALL
//! rtps_reader_samples_max = 65536 # samples the bridge's RustDDS reader may hold untaken
//!                                # (64..=4194304, default 65536; see below)
//! ```
//!
//! `rtps_reader_samples_max` is how many samples the bridge's RustDDS reader of the topic
//! may hold untaken (its RESOURCE_LIMITS, and the most the bridge takes at once). RustDDS
//! 0.15 acknowledges a sample on receipt (it has no flow control), so an RTPS writer that
//! outruns the bridge by more than this loses the oldest untaken samples at the bridge,
//! which reports them (`rtps_gaps` in `STATS`, `LOST rtps_gaps=N` as they happen).
//! Memory: RustDDS 0.15 preallocates nothing for it (its topic cache is a map that grows
//! sample by sample), but the memory does not follow the backlog either: a take only
//! moves the reader's read mark, and a KEEP_ALL cache drops samples only past this limit,
//! so the reader keeps the newest this-many samples it received, taken or not. Once that
//! many have arrived it holds this many samples for the bridge's life: at 1 KiB, 64 MiB of
//! payload at the default and 4 GiB at the largest setting, and more with RustDDS's
//! bookkeeping (a debug-build bridge that had taken 157,000 samples of 1 KiB from
//! `ddsperf pub` was 430 MiB resident).
//!
//! Every error names the file, the key and (when the TOML parser knows it) the line.

use std::net::IpAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::keys::KeyLayout;

/// Most topics one bridge forwards (each one holds a reader and a writer per side).
pub const BRIDGE_TOPICS_MAX: usize = 256;
/// The largest RTPS domain id: the RTPS port mapping (7400 + 250 × domain id, plus the
/// participant and unicast offsets) must stay below 65,536.
pub const RTPS_DOMAIN_ID_MAX: u16 = 232;

/// Deepest KEEP_LAST history the RTPS side is given.
pub const HISTORY_DEPTH_MAX: i32 = 1 << 20;

/// Most samples a bridge's RTPS reader keeps untaken unless its topic sets
/// `rtps_reader_samples_max` ([`TopicConfig::rtps_reader_samples_max`]; RustDDS keeps 64
/// unless told), and the window of the bridge's RTPS writers (`rtps::qos_of`).
pub const RTPS_READER_SAMPLES_MAX: i32 = 1 << 16;

/// Smallest `rtps_reader_samples_max` a topic may set: RustDDS's own default (64).
pub const RTPS_READER_SAMPLES_MAX_LOWEST: i32 = 64;

/// Largest `rtps_reader_samples_max` a topic may set: RustDDS 0.15 keeps that many
/// samples once they arrived, taken or not (the module docs): 4 GiB of 1 KiB samples.
pub const RTPS_READER_SAMPLES_MAX_HIGHEST: i32 = 1 << 22;

// The default lies within the bounds a file may set.
const _: () = assert!(
    RTPS_READER_SAMPLES_MAX_LOWEST <= RTPS_READER_SAMPLES_MAX
        && RTPS_READER_SAMPLES_MAX <= RTPS_READER_SAMPLES_MAX_HIGHEST
);

/// Which way a topic's samples go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// RTPS → Spindle and Spindle → RTPS.
    Both,
    /// Only from the RTPS domain into the Spindle domain.
    RtpsToSpindle,
    /// Only from the Spindle domain out to the RTPS domain.
    SpindleToRtps,
}

impl Direction {
    /// True when RTPS samples go into Spindle.
    pub fn into_spindle(self) -> bool {
        matches!(self, Direction::Both | Direction::RtpsToSpindle)
    }
    /// True when Spindle samples go out to RTPS.
    pub fn into_rtps(self) -> bool {
        matches!(self, Direction::Both | Direction::SpindleToRtps)
    }
}

/// RELIABILITY on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReliabilityKind {
    /// RELIABLE (Spindle: the Atomic or VolatileStore level).
    Reliable,
    /// BEST_EFFORT (Spindle: the Unordered level).
    BestEffort,
}

/// DURABILITY on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DurabilityKind {
    /// VOLATILE.
    Volatile,
    /// TRANSIENT_LOCAL (Spindle: the VolatileStore level when reliable).
    TransientLocal,
}

/// One forwarded topic.
#[derive(Debug, Clone)]
pub struct TopicConfig {
    /// The topic name, the same on both sides.
    pub name: String,
    /// The registered type name, the same on both sides.
    pub type_name: String,
    /// The key's layout (`None` for a keyless topic).
    pub key: Option<KeyLayout>,
    /// Which way samples go.
    pub direction: Direction,
    /// RELIABILITY.
    pub reliability: ReliabilityKind,
    /// DURABILITY.
    pub durability: DurabilityKind,
    /// KEEP_LAST depth on the RTPS side (0: KEEP_ALL).
    pub history_depth: i32,
    /// Most samples the bridge's RTPS reader of the topic holds untaken (its
    /// RESOURCE_LIMITS, and the bridge's take batch); default
    /// [`RTPS_READER_SAMPLES_MAX`], within [`RTPS_READER_SAMPLES_MAX_LOWEST`]..=
    /// [`RTPS_READER_SAMPLES_MAX_HIGHEST`].
    pub rtps_reader_samples_max: i32,
}

impl TopicConfig {
    /// The limit the bridge's RTPS reader of the topic is held to (its RESOURCE_LIMITS,
    /// the take batch, the gap warning): `rtps_reader_samples_max` within
    /// [`RTPS_READER_SAMPLES_MAX_LOWEST`]..=[`RTPS_READER_SAMPLES_MAX_HIGHEST`] — a file's
    /// value always is; a `TopicConfig` made by hand is held to the same bounds.
    pub fn rtps_reader_samples(&self) -> i32 {
        self.rtps_reader_samples_max.clamp(
            RTPS_READER_SAMPLES_MAX_LOWEST,
            RTPS_READER_SAMPLES_MAX_HIGHEST,
        )
    }
}

/// The whole bridge configuration.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The RTPS domain id.
    pub rtps_domain_id: u16,
    /// Interfaces RustDDS may use for multicast and advertise (None: all).
    pub only_networks: Option<Vec<IpAddr>>,
    /// The Spindle participant configuration file.
    pub spindle_config: PathBuf,
    /// The topics.
    pub topics: Vec<TopicConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    rtps: RtpsToml,
    spindle: SpindleToml,
    #[serde(default)]
    topic: Vec<toml::Spanned<TopicToml>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RtpsToml {
    domain_id: toml::Spanned<u16>,
    only_networks: Option<Vec<IpAddr>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpindleToml {
    config: PathBuf,
}

fn default_direction() -> Direction {
    Direction::Both
}
fn default_reliability() -> ReliabilityKind {
    ReliabilityKind::Reliable
}
fn default_durability() -> DurabilityKind {
    DurabilityKind::Volatile
}
fn default_history_depth() -> i32 {
    0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicToml {
    name: String,
    type_name: String,
    keyed: bool,
    #[serde(default)]
    key: Vec<String>,
    #[serde(default = "default_direction")]
    direction: Direction,
    #[serde(default = "default_reliability")]
    reliability: ReliabilityKind,
    #[serde(default = "default_durability")]
    durability: DurabilityKind,
    #[serde(default = "default_history_depth")]
    history_depth: i32,
    /// Checked after parsing, so that a wrong type names the topic and the bounds too.
    #[serde(default)]
    rtps_reader_samples_max: Option<toml::Spanned<toml::Value>>,
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.get(..at)
        .map(|s| s.bytes().filter(|b| *b == b'\n').count() + 1)
        .unwrap_or(0)
}

impl BridgeConfig {
    /// Parses TOML text; `origin` names it in errors and relative paths resolve against
    /// `base`.
    pub fn from_toml_str(text: &str, origin: &str, base: &Path) -> Result<Self> {
        let file: FileToml = toml::from_str(text).map_err(|e| Error::Config {
            origin: origin.to_string(),
            // The toml error names the key and shows the line and column.
            what: e.to_string(),
        })?;
        let bad = |span: Range<usize>, what: String| Error::Config {
            origin: origin.to_string(),
            what: format!("line {}: {what}", line_of(text, span.start)),
        };
        let domain_id = *file.rtps.domain_id.get_ref();
        if domain_id > RTPS_DOMAIN_ID_MAX {
            return Err(bad(
                file.rtps.domain_id.span(),
                format!(
                    "[rtps] domain_id = {domain_id}: at most {RTPS_DOMAIN_ID_MAX} (RTPS maps a \
                     domain to UDP ports 7400 + 250 × domain_id and up)"
                ),
            ));
        }
        if file.topic.is_empty() {
            return Err(Error::Config {
                origin: origin.to_string(),
                what: "no [[topic]]: a bridge forwards the topics it lists".into(),
            });
        }
        if file.topic.len() > BRIDGE_TOPICS_MAX {
            let span = file.topic[BRIDGE_TOPICS_MAX].span();
            return Err(bad(
                span,
                format!("[[topic]]: at most {BRIDGE_TOPICS_MAX} topics"),
            ));
        }
        let mut topics: Vec<TopicConfig> = Vec::with_capacity(file.topic.len());
        for spanned in file.topic {
            let span = spanned.span();
            let t = spanned.into_inner();
            if t.name.is_empty() {
                return Err(bad(span, "[[topic]] name: must not be empty".into()));
            }
            if t.type_name.is_empty() {
                return Err(bad(
                    span,
                    format!("[[topic]] {:?} type_name: must not be empty", t.name),
                ));
            }
            if topics.iter().any(|o| o.name == t.name) {
                return Err(bad(
                    span,
                    format!("[[topic]] name {:?}: listed twice", t.name),
                ));
            }
            let key = match (t.keyed, t.key.is_empty()) {
                (true, true) => {
                    return Err(bad(
                        span,
                        format!(
                            "[[topic]] {:?} key: a keyed topic needs its key members' types \
                             (e.g. key = [\"string\"])",
                            t.name
                        ),
                    ))
                }
                (false, false) => {
                    return Err(bad(
                        span,
                        format!("[[topic]] {:?} key: given but keyed = false", t.name),
                    ))
                }
                (true, false) => Some(KeyLayout::parse(&t.key).map_err(|why| {
                    bad(span.clone(), format!("[[topic]] {:?} key: {why}", t.name))
                })?),
                (false, true) => None,
            };
            if !(0..=HISTORY_DEPTH_MAX).contains(&t.history_depth) {
                return Err(bad(
                    span,
                    format!(
                        "[[topic]] {:?} history_depth = {}: must be 0..={HISTORY_DEPTH_MAX}",
                        t.name, t.history_depth
                    ),
                ));
            }
            let rtps_reader_samples_max = match t.rtps_reader_samples_max {
                None => RTPS_READER_SAMPLES_MAX,
                Some(v) => {
                    let at = v.span();
                    let v = v.into_inner();
                    let bounds = RTPS_READER_SAMPLES_MAX_LOWEST..=RTPS_READER_SAMPLES_MAX_HIGHEST;
                    match v.as_integer().and_then(|n| i32::try_from(n).ok()) {
                        Some(n) if bounds.contains(&n) => n,
                        _ => {
                            return Err(bad(
                                at,
                                format!(
                                    "[[topic]] {:?} rtps_reader_samples_max = {v}: must be an \
                                     integer {RTPS_READER_SAMPLES_MAX_LOWEST}..=\
                                     {RTPS_READER_SAMPLES_MAX_HIGHEST}",
                                    t.name
                                ),
                            ))
                        }
                    }
                }
            };
            topics.push(TopicConfig {
                name: t.name,
                type_name: t.type_name,
                key,
                direction: t.direction,
                reliability: t.reliability,
                durability: t.durability,
                history_depth: t.history_depth,
                rtps_reader_samples_max,
            });
        }
        let spindle_config = if file.spindle.config.is_absolute() {
            file.spindle.config
        } else {
            base.join(file.spindle.config)
        };
        Ok(BridgeConfig {
            rtps_domain_id: domain_id,
            only_networks: file.rtps.only_networks,
            spindle_config,
            topics,
        })
    }

    /// Reads a TOML file.
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::Config {
            origin: origin.clone(),
            what: format!("cannot read: {e}"),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_toml_str(&text, &origin, base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[rtps]
domain_id = 7
only_networks = ["127.0.0.1"]

[spindle]
config = "p.toml"

[[topic]]
name = "A"
type_name = "M::A"
keyed = true
key = ["string", "int32"]

[[topic]]
name = "B"
type_name = "M::B"
keyed = false
direction = "spindle_to_rtps"
reliability = "best_effort"
history_depth = 10
rtps_reader_samples_max = 4194304
"#;

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = BridgeConfig::from_toml_str(GOOD, "good.toml", Path::new("/etc/b")).unwrap();
        assert_eq!(c.rtps_domain_id, 7);
        assert_eq!(c.spindle_config, Path::new("/etc/b/p.toml"));
        assert_eq!(c.topics.len(), 2);
        assert_eq!(c.topics[0].direction, Direction::Both);
        assert_eq!(c.topics[0].reliability, ReliabilityKind::Reliable);
        assert!(c.topics[0].key.is_some());
        assert!(c.topics[1].key.is_none());
        assert!(c.topics[1].direction.into_rtps());
        assert!(!c.topics[1].direction.into_spindle());
        assert_eq!(c.topics[1].history_depth, 10);
        assert_eq!(c.topics[0].rtps_reader_samples_max, RTPS_READER_SAMPLES_MAX);
        assert_eq!(
            c.topics[1].rtps_reader_samples_max,
            RTPS_READER_SAMPLES_MAX_HIGHEST
        );
    }

    fn err(text: &str) -> String {
        BridgeConfig::from_toml_str(text, "bad.toml", Path::new("."))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let text = GOOD.replace("reliability = \"best_effort\"", "reliabilty = 1");
        let e = err(&text);
        assert!(e.contains("bad.toml"), "{e}");
        assert!(e.contains("reliabilty"), "{e}");
        assert!(e.contains("line 20"), "{e}");
    }

    #[test]
    fn a_bad_value_is_named_with_its_line() {
        let e = err(&GOOD.replace("\"spindle_to_rtps\"", "\"sideways\""));
        assert!(e.contains("sideways") && e.contains("line 19"), "{e}");
        let e = err(&GOOD.replace("domain_id = 7", "domain_id = 70000"));
        assert!(e.contains("domain_id") && e.contains("line 3"), "{e}");
        // Parses as a u16 but has no RTPS ports.
        let e = err(&GOOD.replace("domain_id = 7", "domain_id = 300"));
        assert!(
            e.contains("[rtps] domain_id = 300: at most 232") && e.contains("line 3"),
            "{e}"
        );
    }

    #[test]
    fn semantic_errors_name_the_topic_key_and_line() {
        let e = err(&GOOD.replace("key = [\"string\", \"int32\"]", ""));
        assert!(e.contains("\"A\" key") && e.contains("line 9"), "{e}");
        let e = err(&GOOD.replace("\"int32\"", "\"int33\""));
        assert!(e.contains("int33") && e.contains("line 9"), "{e}");
        let e = err(&GOOD.replace("history_depth = 10", "history_depth = -1"));
        assert!(e.contains("history_depth") && e.contains("line 15"), "{e}");
        let e = err(&GOOD.replace("name = \"B\"", "name = \"A\""));
        assert!(e.contains("listed twice"), "{e}");
        let e = err("[rtps]\ndomain_id = 1\n");
        assert!(e.contains("spindle"), "{e}");
        let e = err("[rtps]\ndomain_id = 1\n[spindle]\nconfig = \"p.toml\"\n");
        assert!(e.contains("no [[topic]]"), "{e}");
    }

    #[test]
    fn rtps_reader_samples_max_is_bounded_and_an_integer() {
        let set = |v: &str| {
            GOOD.replace(
                "rtps_reader_samples_max = 4194304",
                &format!("rtps_reader_samples_max = {v}"),
            )
        };
        let lowest = BridgeConfig::from_toml_str(&set("64"), "good.toml", Path::new("."));
        assert_eq!(lowest.unwrap().topics[1].rtps_reader_samples_max, 64);
        // Below, above, past i32, and not an integer: the topic, key, bounds and line.
        for v in ["63", "4194305", "-1", "4294967360", "\"many\"", "65536.0"] {
            let e = err(&set(v));
            assert!(
                e.contains("bad.toml")
                    && e.contains("\"B\" rtps_reader_samples_max")
                    && e.contains(v)
                    && e.contains("64..=4194304")
                    && e.contains("line 22"),
                "{v}: {e}"
            );
        }
    }
}
