//! The logged store's second stage: the runtime appends a logged subgroup's deliveries,
//! in delivery order, to its [`spindle_log::Log`], syncs them in groups, and reports the
//! durable prefix to the engine, which publishes it as this member's `persisted_num` in
//! the SST. The minimum over members is the subgroup's global persistence frontier
//! ([`crate::Engine::global_persisted_num`]).
//!
//! Which subgroups are logged, and how, is [`Persistence`]: one log per subgroup in its
//! own directory `<dir>/subgroup-<id>`. Every member of a logged subgroup must log it (a
//! member that does not never raises its `persisted_num`, and the frontier waits for it).
//!
//! An entry's version is `(view id, global index)` of the delivery, its writer the
//! sender's node id, its timestamp what [`Persistence::timestamp_us`] reads from the
//! payload (DCPS: the sample header's source timestamp, the sender's clock; by default 0,
//! "not known").
//!
//! ```
//! use spindle_group::persist::Persistence;
//! use spindle_log::LogConfig;
//!
//! let dir = std::env::temp_dir().join(format!("spindle-persist-doc-{}", std::process::id()));
//! let p = Persistence::new(&dir).subgroup(3, LogConfig::default());
//! let persister = p.open()?;
//! assert!(persister.log(3).is_some());
//! assert!(persister.log(4).is_none());
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), spindle_group::Error>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use spindle_log::{EntryMeta, Log, LogConfig, Version};

use crate::engine::DeliveryBatch;
use crate::error::{Error, Result};
use crate::group::Group;
use crate::layout::SubgroupId;

/// Reads the sender's timestamp (microseconds since the Unix epoch) from a payload.
pub type TimestampFn = fn(&[u8]) -> u64;

fn no_timestamp(_: &[u8]) -> u64 {
    0
}

/// Which subgroups a node logs, where, and how.
#[derive(Debug, Clone)]
pub struct Persistence {
    /// The data directory; subgroup `id` logs to `<dir>/subgroup-<id>`.
    pub dir: PathBuf,
    /// The logged subgroups and each one's log settings.
    pub subgroups: BTreeMap<SubgroupId, LogConfig>,
    /// Reads an entry's timestamp from its payload.
    pub timestamp_us: TimestampFn,
}

impl Persistence {
    /// No logged subgroup yet, logs under `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Persistence {
        Persistence {
            dir: dir.as_ref().to_path_buf(),
            subgroups: BTreeMap::new(),
            timestamp_us: no_timestamp,
        }
    }

    /// Logs subgroup `id` with `config`.
    pub fn subgroup(mut self, id: SubgroupId, config: LogConfig) -> Persistence {
        self.subgroups.insert(id, config);
        self
    }

    /// Reads entry timestamps with `f`.
    pub fn timestamps(mut self, f: TimestampFn) -> Persistence {
        self.timestamp_us = f;
        self
    }

    /// The directory of subgroup `id`'s log.
    pub fn subgroup_dir(&self, id: SubgroupId) -> PathBuf {
        self.dir.join(format!("subgroup-{id}"))
    }

    /// Opens (creating, or recovering) every subgroup's log.
    pub fn open(&self) -> Result<Persister> {
        let mut logs = BTreeMap::new();
        for (id, config) in &self.subgroups {
            let log = Log::open(self.subgroup_dir(*id), config.clone())?;
            logs.insert(
                *id,
                SubgroupLog {
                    log,
                    appended_vid: None,
                    appended_num: 0,
                    global: (0, 0),
                },
            );
        }
        Ok(Persister {
            logs,
            vid: None,
            timestamp_us: self.timestamp_us,
        })
    }
}

#[derive(Debug)]
struct SubgroupLog {
    log: Log,
    /// The view of the last append, and how far into its delivery order it reached (the
    /// last appended global index + 1).
    appended_vid: Option<u32>,
    appended_num: u64,
    /// The last global frontier reported: (view id, global persisted_num).
    global: (u32, u64),
}

/// The open logs of one node and the bookkeeping between them and its [`Group`].
#[derive(Debug)]
pub struct Persister {
    logs: BTreeMap<SubgroupId, SubgroupLog>,
    vid: Option<u32>,
    timestamp_us: TimestampFn,
}

/// A logged subgroup's global persistence frontier moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistedFrontier {
    /// The subgroup.
    pub subgroup: SubgroupId,
    /// The view.
    pub vid: u32,
    /// Every message of the view's delivery order below this global index is durable at
    /// every member.
    pub global_persisted_num: u64,
}

impl Persister {
    /// Subgroup `id`'s log, if it is logged.
    pub fn log(&self, id: SubgroupId) -> Option<&Log> {
        self.logs.get(&id).map(|l| &l.log)
    }

    /// A new view is installed: later deliveries carry its id.
    pub fn view_installed(&mut self, vid: u32) {
        self.vid = Some(vid);
    }

    /// Appends a delivered batch if its subgroup is logged (buffered, not yet durable).
    /// Deliveries before the first view is known are not logged (there are none: a view
    /// is installed before anything is delivered in it).
    pub fn append(&mut self, batch: &DeliveryBatch) -> Result<()> {
        let (Some(l), Some(vid)) = (self.logs.get_mut(&batch.subgroup()), self.vid) else {
            return Ok(());
        };
        for m in batch.iter() {
            let meta = EntryMeta {
                version: Version::new(u64::from(vid), m.global_index),
                writer: u64::from(m.sender),
                timestamp_us: (self.timestamp_us)(m.payload),
            };
            l.log.append(meta, m.payload)?;
            l.appended_vid = Some(vid);
            l.appended_num = m.global_index + 1;
        }
        Ok(())
    }

    /// Syncs every log with appends waiting (one `fdatasync` each: the group commit of
    /// everything delivered since the last call) and reports each one's durable prefix to
    /// `group` when it belongs to the current view. Returns whether anything was synced.
    pub fn sync(&mut self, group: &mut Group) -> Result<bool> {
        let mut synced = false;
        let current = group.view().map(|v| v.vid);
        for (id, l) in &mut self.logs {
            if l.log.has_unsynced() {
                l.log.sync()?;
                synced = true;
            }
            if l.appended_vid.is_some() && l.appended_vid == current {
                // Between views, or no longer a member: the report belongs to a view that
                // is gone, and the next view's frontier starts over.
                match group.handle_persisted(*id, l.appended_num) {
                    Ok(()) | Err(Error::Wedged { .. } | Error::UnknownSubgroup { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(synced)
    }

    /// The logged subgroups whose global persistence frontier moved since the last call.
    pub fn frontiers(&mut self, group: &Group) -> Vec<PersistedFrontier> {
        let mut moved = Vec::new();
        let Some(engine) = group.engine() else {
            return moved;
        };
        let vid = engine.view().vid;
        for (id, l) in &mut self.logs {
            let Ok(g) = engine.global_persisted_num(*id) else {
                continue;
            };
            if g > 0 && (vid, g) > l.global {
                l.global = (vid, g);
                moved.push(PersistedFrontier {
                    subgroup: *id,
                    vid,
                    global_persisted_num: g,
                });
            }
        }
        moved
    }
}
