//! The logged store's second stage: the runtime appends a logged subgroup's deliveries,
//! in delivery order, to its [`spindle_log::Log`], syncs them in groups, and reports the
//! durable prefix to the engine, which publishes it as this member's `persisted_num` in
//! the SST. The minimum over members is the subgroup's global persistence frontier
//! ([`crate::Engine::global_persisted_num`]).
//!
//! Which subgroups are logged, and how, is [`Persistence`]: one log per subgroup in its
//! own directory `<dir>/subgroup-<id>`. Every member of a logged subgroup must log it (a
//! member that does not never raises its `persisted_num`, and the frontier waits for it),
//! and a logged subgroup must be in atomic mode: its versions follow the total order
//! (unordered delivery does not give increasing global indexes, and the log refuses an
//! append that does not increase, which stops logging on that node).
//!
//! **Restart after total failure** (Derecho App. B.4–B.6). Every installed view is logged
//! and synced in `<dir>/views` before anything is delivered in it. After every process
//! died, each restarting member sends its [`RestartReport`] (last view, last version per
//! subgroup) to a restart leader, which decides with [`restart_plan`]: wait until a
//! majority of the last view has reported, then restore each subgroup to the longest
//! reported log and resume in the next view id. Each member brings its log to that state
//! with [`Persister::restore`] (cut what lies beyond it, append what it lacks, check the
//! two logs meet). The decision and the log repair are tested in simulation
//! (`tests/restart.rs`); [`crate::restart`] carries the reports, the plan and the log
//! suffixes between processes over the fabric.
//!
//! A member that enters a logged subgroup someone held gets its state by transfer; with
//! [`Persistence::state_entries`] the entries of that state which its log lacks are
//! appended before anything of the new view, so every member's log is a prefix of one
//! sequence. [`Retention`] bounds a log by count and age, removing whole old segments.
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
use std::sync::{Arc, Mutex};

use spindle_log::{EntryMeta, Log, LogConfig, Version};

use crate::engine::DeliveryBatch;
use crate::error::{Error, Result};
use crate::group::{Group, GroupOutput};
use crate::layout::{SubgroupId, View};
use spindle_transport_rdma::NodeId;

/// The directory, beside the subgroups' logs, of the log of installed views.
pub const VIEWS_DIR: &str = "views";

/// What one node brings to a restart after total failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartReport {
    /// The node.
    pub node: NodeId,
    /// The last view it logged.
    pub last_view: Option<View>,
    /// Per logged subgroup, the last version its log holds.
    pub tails: BTreeMap<SubgroupId, Option<Version>>,
}

/// What a restart after total failure does (Derecho App. B.4–B.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartPlan {
    /// Fewer than a majority of the last view's members reported: wait for more, never
    /// invent a state.
    Wait {
        /// The last view any reporter logged.
        last_vid: u32,
        /// Its members that reported.
        have: usize,
        /// How many it takes (a majority of its members).
        need: usize,
    },
    /// A majority reported, but the last view any of them logged is `u32::MAX`, the last
    /// view id: no view can follow it, so the domain cannot restart (a report or a log
    /// carried it; a wrap to view 0 would reuse every view id).
    LastViewId,
    /// Restart in view `vid` (above every logged one); each logged subgroup's state is
    /// the log of `sources[sg].0`, which ends at `sources[sg].1`.
    Restore {
        /// The id of the first view after the restart.
        vid: u32,
        /// Per subgroup: the node whose log is the restored state, and its last version.
        sources: BTreeMap<SubgroupId, (NodeId, Option<Version>)>,
    },
}

/// The restart leader's decision from the reports it collected (pure).
///
/// The last view is the highest any reporter logged; a majority of its members must have
/// reported (a view change needs a majority of the previous view, so a majority of the
/// last view has seen every view after any it knows). Per subgroup, the restored state is
/// the longest log among the reports: every globally persisted version is in every
/// member's log, so in all of them; and every logged version was delivered, which in
/// atomic mode means every member had received it, so it lies inside any ragged trim and
/// is safe to keep (Derecho B.6). Logs of members that did not report may run further;
/// they are cut back to this state when those members return ([`Persister::restore`]).
pub fn restart_plan(reports: &[RestartReport]) -> RestartPlan {
    let last = reports
        .iter()
        .filter_map(|r| r.last_view.as_ref())
        .max_by_key(|v| v.vid);
    let (last_vid, members) = match last {
        Some(v) => (v.vid, v.members.clone()),
        None => (0, Vec::new()),
    };
    let need = members.len() / 2 + 1;
    let have = members
        .iter()
        .filter(|m| reports.iter().any(|r| r.node == **m))
        .count();
    if last.is_none() || have < need {
        return RestartPlan::Wait {
            last_vid,
            have,
            need: if last.is_none() { 1 } else { need },
        };
    }
    let mut sources: BTreeMap<SubgroupId, (NodeId, Option<Version>)> = BTreeMap::new();
    for r in reports {
        for (sg, tail) in &r.tails {
            let e = sources.entry(*sg).or_insert((r.node, *tail));
            if *tail > e.1 {
                *e = (r.node, *tail);
            }
        }
    }
    // The last view id (from a peer's report or a log) has no next.
    let Some(vid) = last_vid.checked_add(1) else {
        return RestartPlan::LastViewId;
    };
    RestartPlan::Restore { vid, sources }
}

/// How much history a logged subgroup's log keeps (retention). Whole segments go, oldest
/// first, once every entry in them is past a bound, so a log keeps at least what the
/// bounds say and at most one segment more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Keep the newest this many entries (`None`: all).
    pub entries_max: Option<u64>,
    /// Keep entries whose timestamp is at most this old (`None`: any age).
    pub age_max_us: Option<u64>,
}

/// The retention of each subgroup, shared with the application, which may change it while
/// the runtime runs (DCPS: from its writers' QoS).
pub type RetentionHandle = Arc<Mutex<BTreeMap<SubgroupId, Retention>>>;

/// How often the runtime applies retention (µs of wall-clock time).
pub const RETENTION_CHECK_US: u64 = 1_000_000;

/// Reads the sender's timestamp (microseconds since the Unix epoch) from a payload.
pub type TimestampFn = fn(&[u8]) -> u64;

/// Says whether a delivered payload belongs in the log (DCPS: only samples offered at
/// the LoggedStore level; other topics may share the subgroup).
pub type KeepFn = fn(&[u8]) -> bool;

/// Reads the log entries out of a state transfer's snapshot of a subgroup (the
/// application's format): what a member entering a logged subgroup appends to its log, so
/// that its log holds the history delivered before it entered, as the others' do. A
/// state that does not decode is an error (what is wrong with it): the log is left as it
/// is, never cut as if the state were empty.
pub type StateEntriesFn = fn(&[u8]) -> std::result::Result<Vec<(EntryMeta, Vec<u8>)>, String>;

fn no_timestamp(_: &[u8]) -> u64 {
    0
}

fn keep_all(_: &[u8]) -> bool {
    true
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
    /// Which delivered payloads are appended (by default all). A message that is not
    /// kept still counts in `persisted_num`: nothing of it needs to be durable.
    pub keep: KeepFn,
    /// Each subgroup's retention (by default none: keep everything).
    pub retention: RetentionHandle,
    /// Reads the entries of a state transfer (by default none are logged).
    pub state_entries: Option<StateEntriesFn>,
}

impl Persistence {
    /// No logged subgroup yet, logs under `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Persistence {
        Persistence {
            dir: dir.as_ref().to_path_buf(),
            subgroups: BTreeMap::new(),
            timestamp_us: no_timestamp,
            keep: keep_all,
            retention: RetentionHandle::default(),
            state_entries: None,
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

    /// Logs what a state transfer brings, read with `f`.
    pub fn state_entries(mut self, f: StateEntriesFn) -> Persistence {
        self.state_entries = Some(f);
        self
    }

    /// Appends only the payloads `f` keeps.
    pub fn keeping(mut self, f: KeepFn) -> Persistence {
        self.keep = f;
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
        let views = Log::open(self.dir.join(VIEWS_DIR), LogConfig::default())?;
        Ok(Persister {
            logs,
            views,
            vid: None,
            timestamp_us: self.timestamp_us,
            keep: self.keep,
            retention: Arc::clone(&self.retention),
            next_retention_us: 0,
            state_entries: self.state_entries,
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
    /// Every view installed, durable before anything is delivered in it (Derecho B.4):
    /// version `(vid, 0)`, payload the member ids (u32 little-endian each).
    views: Log,
    vid: Option<u32>,
    timestamp_us: TimestampFn,
    keep: KeepFn,
    retention: RetentionHandle,
    /// When (wall clock, µs) `commit` next applies retention.
    next_retention_us: u64,
    state_entries: Option<StateEntriesFn>,
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

    /// A new view is installed: later deliveries carry its id. The view is logged and
    /// synced first, so a restart after total failure knows the last view (and the
    /// majority it needs) even when nothing was delivered in it.
    pub fn view_installed(&mut self, view: &View) -> Result<()> {
        self.vid = Some(view.vid);
        if self
            .views
            .last_version()
            .is_some_and(|v| v.view_id >= u64::from(view.vid))
        {
            return Ok(()); // logged before this restart
        }
        let members: Vec<u8> = view.members.iter().flat_map(|m| m.to_le_bytes()).collect();
        let meta = EntryMeta {
            version: Version::new(u64::from(view.vid), 0),
            writer: 0,
            timestamp_us: 0,
        };
        self.views.append(meta, &members)?;
        self.views.sync()?;
        Ok(())
    }

    /// The last view this node logged, if any: its id and members.
    pub fn last_view(&mut self) -> Result<Option<View>> {
        let Some(last) = self.views.last_version() else {
            return Ok(None);
        };
        let Some(e) = self.views.get(last)? else {
            return Ok(None);
        };
        if e.payload.len() % 4 != 0 {
            return Err(spindle_log::LogError::Corrupt {
                path: self.views.dir().to_path_buf(),
                offset: 0,
                reason: format!(
                    "view {} has a member list of {} bytes",
                    last,
                    e.payload.len()
                ),
            }
            .into());
        }
        let members = e
            .payload
            .chunks_exact(4)
            .map(|c| NodeId::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        // Invariant: view ids are u32 when logged (view_installed).
        let vid = u32::try_from(last.view_id).map_err(|_| Error::Protocol("view id".into()))?;
        Ok(Some(View::new(vid, members)))
    }

    /// What this node brings to a restart after total failure: its last view and the
    /// last version of each logged subgroup.
    pub fn restart_report(&mut self, node: NodeId) -> Result<RestartReport> {
        Ok(RestartReport {
            node,
            last_view: self.last_view()?,
            tails: self
                .logs
                .iter()
                .map(|(id, l)| (*id, l.log.last_version()))
                .collect(),
        })
    }

    /// Subgroup `id`'s log, to read entries from (the source of a restore).
    pub fn log_mut(&mut self, id: SubgroupId) -> Option<&mut Log> {
        self.logs.get_mut(&id).map(|l| &mut l.log)
    }

    /// Makes subgroup `id`'s log the restored state `last` of a restart: entries past
    /// `last` are cut (delivered here but not in the state the restart chose), and the
    /// entries of `source` (the chosen log's, read by [`Log::range`]) that this log lacks
    /// are appended, then synced. The source must extend this log: a log that is not a
    /// prefix of it is an error ([`Error::Protocol`]), never silently overwritten.
    pub fn restore(
        &mut self,
        id: SubgroupId,
        last: Option<Version>,
        source: impl IntoIterator<Item = spindle_log::Entry>,
    ) -> Result<()> {
        let Some(l) = self.logs.get_mut(&id) else {
            return Ok(());
        };
        let log = &mut l.log;
        log.truncate_after(last.unwrap_or_default())?;
        let mine = log.last_version();
        let mut checked = mine.is_none();
        for e in source {
            if Some(e.meta.version) <= mine {
                if Some(e.meta.version) == mine {
                    let own = log.get(e.meta.version)?;
                    if own.as_ref() != Some(&e) {
                        return Err(Error::Protocol(format!(
                            "subgroup {id}: this log's entry {} differs from the restart's",
                            e.meta.version
                        )));
                    }
                    checked = true;
                }
                continue;
            }
            if !checked {
                return Err(Error::Protocol(format!(
                    "subgroup {id}: this log ends at {mine:?}, which the restart's log lacks"
                )));
            }
            log.append(e.meta, &e.payload)?;
        }
        if !checked {
            return Err(Error::Protocol(format!(
                "subgroup {id}: this log ends at {mine:?}, beyond the restart's {last:?}"
            )));
        }
        log.sync()?;
        Ok(())
    }

    /// Appends a delivered batch if its subgroup is logged (buffered, not yet durable).
    /// Deliveries before the first view is known are not logged (there are none: a view
    /// is installed before anything is delivered in it).
    pub fn append(&mut self, batch: &DeliveryBatch) -> Result<()> {
        let (Some(l), Some(vid)) = (self.logs.get_mut(&batch.subgroup()), self.vid) else {
            return Ok(());
        };
        for m in batch.iter() {
            l.appended_vid = Some(vid);
            l.appended_num = m.global_index + 1;
            if !(self.keep)(m.payload) {
                continue;
            }
            let meta = EntryMeta {
                version: Version::new(u64::from(vid), m.global_index),
                writer: u64::from(m.sender),
                timestamp_us: (self.timestamp_us)(m.payload),
            };
            l.log.append(meta, m.payload)?;
        }
        Ok(())
    }

    /// The second stage for one output of the group, before the application sees it: a
    /// delivery is appended ([`Persister::append`]), a view logged
    /// ([`Persister::view_installed`]).
    pub fn record(&mut self, out: &GroupOutput) -> Result<()> {
        match out {
            GroupOutput::Delivery(b) => self.append(b),
            GroupOutput::ViewInstalled(v) => self.view_installed(&v.view),
            GroupOutput::InstallState { subgroup, state } => self.install(*subgroup, state),
            _ => Ok(()),
        }
    }

    /// This node entered logged subgroup `id` and a member shipped its state: the entries
    /// in it that this log lacks (past its last version) are appended, oldest first, before
    /// anything the new view delivers, so the log holds the history as the others' do.
    ///
    /// First, what this log holds past the newest entry the state also holds (same
    /// version, writer and timestamp) is cut: it
    /// was delivered here (before a total failure, say, in the part of a view the restart
    /// did not keep) but the domain went on without it, so it is not in the one sequence
    /// every member logs, and keeping it would make this log diverge from the others'
    /// (found by the total-crash checker, `dds-core/tests/sim_crash.rs`). An empty state
    /// cuts everything. (A state trimmed by a HISTORY depth may lack this log's newest
    /// entries although the domain holds them; they are cut too, and the log keeps the
    /// state's newer entries after a gap, as it would for the older ones.)
    fn install(&mut self, id: SubgroupId, state: &[u8]) -> Result<()> {
        let (Some(f), Some(l)) = (self.state_entries, self.logs.get_mut(&id)) else {
            return Ok(());
        };
        let mut entries = match f(state) {
            Ok(entries) => entries,
            Err(e) => {
                // A peer's bytes: refused, and the log kept whole (cutting it as for an
                // empty state would lose what it holds). The application, handed the same
                // state, reports it too.
                tracing::warn!(
                    subgroup = id,
                    error = %e,
                    "logged store: a state transfer that does not decode was not logged; this log is kept as it is"
                );
                return Ok(());
            }
        };
        entries.sort_by_key(|(m, _)| m.version);
        // The newest entry of this log that the state holds: same version, writer and
        // timestamp (a restart that began from one member's log may reuse a view id
        // another member logged: equal versions alone do not make equal entries).
        let shared = l
            .log
            .metas()
            .filter(|m| {
                entries
                    .binary_search_by_key(&m.version, |(e, _)| e.version)
                    .is_ok_and(|i| entries[i].0 == *m)
            })
            .last()
            .map(|m| m.version);
        if shared != l.log.last_version() && !l.log.is_empty() {
            let cut = l.log.truncate_after(shared.unwrap_or_default())?;
            tracing::warn!(
                subgroup = id,
                cut,
                kept_through = ?shared,
                "logged store: entries the domain does not hold were cut from this log"
            );
        }
        for (meta, payload) in entries {
            if Some(meta.version) > l.log.last_version() {
                l.log.append(meta, &payload)?;
            }
        }
        Ok(())
    }

    /// The end of a pass of the runner: the group commit ([`Persister::sync`]), then the
    /// frontiers that moved go to `moved` (the runtime's `Application::persisted`).
    /// Returns whether anything was synced.
    pub fn commit(
        &mut self,
        group: &mut Group,
        mut moved: impl FnMut(&PersistedFrontier),
    ) -> Result<bool> {
        let synced = self.sync(group)?;
        for f in self.frontiers(group) {
            moved(&f);
        }
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        if now_us >= self.next_retention_us {
            self.next_retention_us = now_us + RETENTION_CHECK_US;
            self.retain(now_us)?;
        }
        Ok(synced)
    }

    /// Applies each subgroup's [`Retention`] as of `now_us` (µs since the Unix epoch, the
    /// clock of the entries' timestamps): removes the whole old segments past its bounds.
    /// Returns how many entries went. `commit` calls it every [`RETENTION_CHECK_US`].
    pub fn retain(&mut self, now_us: u64) -> Result<usize> {
        let rules: Vec<(SubgroupId, Retention)> = self
            .retention
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        let mut gone = 0;
        for (sg, r) in rules {
            let Some(l) = self.logs.get_mut(&sg) else {
                continue;
            };
            let log = &mut l.log;
            // The newest entry that may go: past the count bound, or (a prefix) past the
            // age bound.
            let len = log.len() as u64;
            let by_count = r
                .entries_max
                .filter(|max| len > *max)
                .and_then(|max| log.metas().nth((len - max - 1) as usize))
                .map(|m| m.version);
            let by_age = r.age_max_us.and_then(|age| {
                let cutoff = now_us.saturating_sub(age);
                log.metas()
                    .take_while(|m| m.timestamp_us < cutoff)
                    .last()
                    .map(|m| m.version)
            });
            if let Some(v) = by_count.max(by_age) {
                // Never past what is durable: only sealed (synced) segments go anyway.
                gone += log.remove_segments_through(v)?;
            }
        }
        Ok(gone)
    }

    /// The simulated crash of this node and its machine (the crash tests' disk; see
    /// [`Log::crash`]): every log is gone without a sync, and what its disk keeps of the
    /// unsynced bytes is what `torn` says for its subgroup. The log of views is synced at
    /// every append, so it loses nothing. Returns what each subgroup's log kept.
    pub fn crash(
        self,
        mut torn: impl FnMut(SubgroupId) -> spindle_log::TornWrite,
    ) -> Result<Vec<(SubgroupId, spindle_log::CrashImage)>> {
        let mut images = Vec::new();
        for (id, l) in self.logs {
            images.push((id, l.log.crash(&torn(id))?));
        }
        self.views.crash(&spindle_log::TornWrite::default())?;
        Ok(images)
    }

    /// The retention handle (shared with the [`Persistence`] this came from).
    pub fn retention(&self) -> RetentionHandle {
        Arc::clone(&self.retention)
    }

    /// The logged subgroups.
    pub fn subgroups(&self) -> impl Iterator<Item = SubgroupId> + '_ {
        self.logs.keys().copied()
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
