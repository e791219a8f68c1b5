//! Restart after total failure over the network (Derecho App. B.4–B.5): every process of a
//! domain died; each restarts from its data directory and, before its group exists, runs
//! this protocol with the others over its fabric endpoint.
//!
//! 1. Every restarting member sends its [`RestartReport`] (last logged view, last version
//!    of each logged subgroup) and its address to the **restart leader** (the lowest id
//!    among the configured bootstrap members), again every [`REPORT_RESEND_US`] until the
//!    leader answers.
//! 2. The leader decides with [`restart_plan`]. Until a majority of the last logged view
//!    has reported it **waits, and says so** (a warning every [`WAIT_NOTICE_US`] naming
//!    the view and how many of how many reported) — it never invents a state. Once every
//!    member of the last view reported, or a majority did and [`RestartConfig::grace_us`]
//!    passed, it sends the [`Plan`] to every reporter: the view to resume in (above every
//!    logged one), its members (the reporters) and their addresses, and per subgroup the
//!    member whose log is the restored state and the version it ends at.
//! 3. Each member brings each logged subgroup's log to that state: it asks the source for
//!    the entries from its own last version (inclusive, so the two logs are checked to
//!    meet) to the plan's, in chunks of at most [`CHUNK_BYTES_MAX`], and applies them with
//!    [`Persister::restore`], which cuts what lies beyond the restored state (delivered
//!    here but not kept) and appends what it lacks, then syncs. Then it tells the leader.
//! 4. When every member is done the leader sends GO, and every member starts its group
//!    with [`crate::Group::bootstrap`] in the plan's view.
//!
//! A report names the group its member is configured for
//! ([`RestartConfig::group_id`]); the leader answers one of another group with a refusal
//! naming its own, does not count it, and the refused member stops with
//! [`Error::Restart`] naming both (a member of another domain, or of a build with another
//! wire format, restarting against this domain's leader).
//!
//! Every member serves the others' fetches until GO. Messages travel as two-sided sends
//! with the immediate [`RESTART_IMM`]; a member's group ignores stray ones. The decoding
//! of a peer's bytes returns an error naming what is wrong, never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use spindle_log::{Entry, EntryMeta, Version};
use spindle_transport_rdma::{Endpoint, Event, NodeId};

use crate::error::{Error, Result};
use crate::layout::{SubgroupId, View};
use crate::persist::{restart_plan, Persister, RestartPlan, RestartReport};

/// The immediate of every restart message (the group's membership messages use
/// [`crate::group::MEMBERSHIP_IMM`]).
pub const RESTART_IMM: u32 = 0x5D5_0002;
/// How often a member re-sends its report (and re-dials the leader) until the plan comes.
pub const REPORT_RESEND_US: u64 = 200_000;
/// How often a waiting leader or member says what it waits for.
pub const WAIT_NOTICE_US: u64 = 1_000_000;
/// Most payload bytes of log entries in one message of a fetch.
pub const CHUNK_BYTES_MAX: usize = 1 << 20;
/// Most members one plan names, and most subgroups one report or plan carries (bounds on
/// what a peer's bytes may ask us to allocate).
pub const PLAN_MEMBERS_MAX: usize = 1024;
/// See [`PLAN_MEMBERS_MAX`].
pub const PLAN_SUBGROUPS_MAX: usize = 1024;
/// Longest address a message carries.
const ADDRESS_BYTES_MAX: usize = 512;

/// How this node takes part in a restart.
#[derive(Debug, Clone)]
pub struct RestartConfig {
    /// The restart leader (every member must name the same one).
    pub leader: NodeId,
    /// The leader's fabric address.
    pub leader_address: String,
    /// How long the leader waits, once a majority of the last view reported, for the rest
    /// of its members before it restarts without them.
    pub grace_us: u64,
    /// How long the whole restart may take before it gives up ([`Error::Restart`]).
    pub timeout: Duration,
    /// The group this node is configured for (as [`crate::group::GroupConfig::group_id`]):
    /// the leader refuses a report of another.
    pub group_id: u64,
    /// How messages name a group (as [`crate::group::GroupConfig::group_label`]).
    pub group_label: fn(u64) -> String,
}

/// What the leader decided: the view the domain resumes in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The first view after the restart; its members are the nodes that reported.
    pub view: View,
    /// Every member's fabric address.
    pub addresses: BTreeMap<NodeId, String>,
    /// Per logged subgroup: the node whose log is the restored state, and its last version.
    pub sources: BTreeMap<SubgroupId, (NodeId, Option<Version>)>,
}

/// One restart message.
#[derive(Debug, Clone, PartialEq)]
enum Msg {
    Report {
        report: RestartReport,
        address: String,
        group_id: u64,
    },
    /// The leader's answer to a report of another group: its own.
    Refused {
        group_id: u64,
    },
    Plan(Plan),
    Fetch {
        subgroup: SubgroupId,
        from: Option<Version>,
        to: Option<Version>,
    },
    Entries {
        subgroup: SubgroupId,
        last: bool,
        entries: Vec<Entry>,
    },
    Done,
    Go,
}

// ----- the wire ------------------------------------------------------------------------

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "restart message of {} bytes ends inside {what} at byte {}",
                    self.bytes.len(),
                    self.at
                ))
            })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(w))
    }
    fn count(&mut self, max: usize, what: &str) -> Result<usize> {
        let n = usize::from(self.u16(what)?);
        if n > max {
            return Err(Error::Protocol(format!(
                "restart message: {n} {what}, at most {max}"
            )));
        }
        Ok(n)
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let n = usize::from(self.u16(what)?);
        if n > ADDRESS_BYTES_MAX {
            return Err(Error::Protocol(format!(
                "restart message: {what} of {n} bytes"
            )));
        }
        String::from_utf8(self.take(n, what)?.to_vec())
            .map_err(|_| Error::Protocol(format!("restart message: {what} is not UTF-8")))
    }
    fn version(&mut self, what: &str) -> Result<Option<Version>> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(Version::new(self.u64(what)?, self.u64(what)?))),
            t => Err(Error::Protocol(format!("restart message: {what} tag {t}"))),
        }
    }
    fn end(&self) -> Result<()> {
        if self.at != self.bytes.len() {
            return Err(Error::Protocol(format!(
                "restart message has {} bytes past its end",
                self.bytes.len() - self.at
            )));
        }
        Ok(())
    }
}

fn put_version(out: &mut Vec<u8>, v: Option<Version>) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.view_id.to_le_bytes());
            out.extend_from_slice(&v.order_index.to_le_bytes());
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Addresses are bounded when they enter (RestartConfig, reports): at most
    // ADDRESS_BYTES_MAX < u16::MAX.
    out.extend_from_slice(&(s.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..s.len().min(usize::from(u16::MAX))]);
}

fn put_members(out: &mut Vec<u8>, members: &[NodeId]) {
    out.extend_from_slice(&(members.len() as u16).to_le_bytes());
    for m in members {
        out.extend_from_slice(&m.to_le_bytes());
    }
}

impl Msg {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Msg::Report {
                report,
                address,
                group_id,
            } => {
                out.push(1);
                out.extend_from_slice(&report.node.to_le_bytes());
                out.extend_from_slice(&group_id.to_le_bytes());
                put_str(&mut out, address);
                match &report.last_view {
                    None => out.push(0),
                    Some(v) => {
                        out.push(1);
                        out.extend_from_slice(&v.vid.to_le_bytes());
                        put_members(&mut out, &v.members);
                    }
                }
                out.extend_from_slice(&(report.tails.len() as u16).to_le_bytes());
                for (sg, t) in &report.tails {
                    out.extend_from_slice(&sg.to_le_bytes());
                    put_version(&mut out, *t);
                }
            }
            Msg::Plan(p) => {
                out.push(2);
                out.extend_from_slice(&p.view.vid.to_le_bytes());
                out.extend_from_slice(&(p.view.members.len() as u16).to_le_bytes());
                for m in &p.view.members {
                    out.extend_from_slice(&m.to_le_bytes());
                    put_str(&mut out, p.addresses.get(m).map_or("", String::as_str));
                }
                out.extend_from_slice(&(p.sources.len() as u16).to_le_bytes());
                for (sg, (node, last)) in &p.sources {
                    out.extend_from_slice(&sg.to_le_bytes());
                    out.extend_from_slice(&node.to_le_bytes());
                    put_version(&mut out, *last);
                }
            }
            Msg::Fetch { subgroup, from, to } => {
                out.push(3);
                out.extend_from_slice(&subgroup.to_le_bytes());
                put_version(&mut out, *from);
                put_version(&mut out, *to);
            }
            Msg::Entries {
                subgroup,
                last,
                entries,
            } => {
                out.push(4);
                out.extend_from_slice(&subgroup.to_le_bytes());
                out.push(u8::from(*last));
                out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
                for e in entries {
                    out.extend_from_slice(&e.meta.version.view_id.to_le_bytes());
                    out.extend_from_slice(&e.meta.version.order_index.to_le_bytes());
                    out.extend_from_slice(&e.meta.writer.to_le_bytes());
                    out.extend_from_slice(&e.meta.timestamp_us.to_le_bytes());
                    out.extend_from_slice(&(e.payload.len() as u32).to_le_bytes());
                    out.extend_from_slice(&e.payload);
                }
            }
            Msg::Done => out.push(5),
            Msg::Go => out.push(6),
            Msg::Refused { group_id } => {
                out.push(7);
                out.extend_from_slice(&group_id.to_le_bytes());
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Msg> {
        let mut r = Reader { bytes, at: 0 };
        let msg = match r.u8("the kind")? {
            1 => {
                let node = r.u32("the node")?;
                let group_id = r.u64("the group")?;
                let address = r.string("the address")?;
                let last_view = match r.u8("the view tag")? {
                    0 => None,
                    1 => {
                        let vid = r.u32("the view id")?;
                        let n = r.count(PLAN_MEMBERS_MAX, "members")?;
                        let members = (0..n)
                            .map(|_| r.u32("a member"))
                            .collect::<Result<Vec<_>>>()?;
                        Some(View::new(vid, members))
                    }
                    t => return Err(Error::Protocol(format!("restart report: view tag {t}"))),
                };
                let n = r.count(PLAN_SUBGROUPS_MAX, "subgroups")?;
                let mut tails = BTreeMap::new();
                for _ in 0..n {
                    let sg = r.u32("a subgroup")?;
                    tails.insert(sg, r.version("a tail")?);
                }
                Msg::Report {
                    report: RestartReport {
                        node,
                        last_view,
                        tails,
                    },
                    address,
                    group_id,
                }
            }
            2 => {
                let vid = r.u32("the view id")?;
                let n = r.count(PLAN_MEMBERS_MAX, "members")?;
                let mut members = Vec::with_capacity(n);
                let mut addresses = BTreeMap::new();
                for _ in 0..n {
                    let m = r.u32("a member")?;
                    members.push(m);
                    addresses.insert(m, r.string("an address")?);
                }
                let n = r.count(PLAN_SUBGROUPS_MAX, "subgroups")?;
                let mut sources = BTreeMap::new();
                for _ in 0..n {
                    let sg = r.u32("a subgroup")?;
                    let node = r.u32("a source")?;
                    sources.insert(sg, (node, r.version("a last version")?));
                }
                Msg::Plan(Plan {
                    view: View::new(vid, members),
                    addresses,
                    sources,
                })
            }
            3 => Msg::Fetch {
                subgroup: r.u32("the subgroup")?,
                from: r.version("from")?,
                to: r.version("to")?,
            },
            4 => {
                let subgroup = r.u32("the subgroup")?;
                let last = r.u8("the last flag")? != 0;
                let n = r.u32("the entry count")? as usize;
                let mut entries = Vec::new();
                for _ in 0..n {
                    let version = Version::new(r.u64("a version")?, r.u64("a version")?);
                    let writer = r.u64("a writer")?;
                    let timestamp_us = r.u64("a timestamp")?;
                    let len = r.u32("a length")? as usize;
                    let payload = r.take(len, "a payload")?.to_vec();
                    entries.push(Entry {
                        meta: EntryMeta {
                            version,
                            writer,
                            timestamp_us,
                        },
                        payload,
                    });
                }
                Msg::Entries {
                    subgroup,
                    last,
                    entries,
                }
            }
            5 => Msg::Done,
            6 => Msg::Go,
            7 => Msg::Refused {
                group_id: r.u64("the group")?,
            },
            k => return Err(Error::Protocol(format!("restart message kind {k}"))),
        };
        r.end()?;
        Ok(msg)
    }
}

// ----- the protocol --------------------------------------------------------------------

/// One node's part of the restart (see the module docs): the messages it handles and the
/// ones it queues, no socket and no clock inside; [`run`] drives it over an endpoint.
#[derive(Debug)]
pub struct Restart {
    me: NodeId,
    address: String,
    config: RestartConfig,
    report: RestartReport,
    /// Leader: every report so far, with its sender's address.
    reports: BTreeMap<NodeId, (RestartReport, String)>,
    /// Leader: when a majority had reported.
    majority_at_us: Option<u64>,
    /// Leader: members that finished their logs.
    done: BTreeSet<NodeId>,
    plan: Option<Plan>,
    /// Fetches under way: subgroup → (the source the plan names, its last version,
    /// entries so far). Entries from anyone but the source are not taken.
    fetching: BTreeMap<SubgroupId, (NodeId, Option<Version>, Vec<Entry>)>,
    sent_done: bool,
    go: bool,
    next_report_us: u64,
    next_notice_us: u64,
    out: Vec<(NodeId, Msg)>,
    /// Leader: members that reported after the decision, and their addresses (at most
    /// [`LATE_MEMBERS_MAX`]), to send them the plan.
    late: BTreeMap<NodeId, String>,
}

/// Late reporters a leader remembers the address of (more are not answered; they join
/// when their restart times out).
pub const LATE_MEMBERS_MAX: usize = 64;

impl Restart {
    /// This node (`me`, at `address`) restarts with `persister`'s logs.
    pub fn new(
        me: NodeId,
        address: String,
        config: RestartConfig,
        persister: &mut Persister,
    ) -> Result<Restart> {
        if address.len() > ADDRESS_BYTES_MAX || config.leader_address.len() > ADDRESS_BYTES_MAX {
            return Err(Error::Config(format!(
                "restart: addresses are at most {ADDRESS_BYTES_MAX} bytes"
            )));
        }
        let report = persister.restart_report(me)?;
        Ok(Restart {
            me,
            address,
            config,
            report,
            reports: BTreeMap::new(),
            majority_at_us: None,
            done: BTreeSet::new(),
            plan: None,
            fetching: BTreeMap::new(),
            sent_done: false,
            go: false,
            next_report_us: 0,
            next_notice_us: WAIT_NOTICE_US,
            out: Vec::new(),
            late: BTreeMap::new(),
        })
    }

    fn is_leader(&self) -> bool {
        self.me == self.config.leader
    }

    /// The plan, once GO came: the group starts in `plan.view`.
    pub fn finished(&self) -> Option<&Plan> {
        self.plan.as_ref().filter(|_| self.go)
    }

    /// The address of `peer`, as far as this node knows it.
    pub fn address_of(&self, peer: NodeId) -> Option<&str> {
        if peer == self.config.leader {
            return Some(&self.config.leader_address);
        }
        if let Some(p) = &self.plan {
            if let Some(a) = p.addresses.get(&peer) {
                return Some(a);
            }
        }
        self.reports
            .get(&peer)
            .map(|(_, a)| a.as_str())
            .or_else(|| self.late.get(&peer).map(String::as_str))
    }

    fn send(&mut self, to: NodeId, msg: Msg) {
        self.out.push((to, msg));
    }

    /// Time passed: re-sends the report, lets the leader decide, says what it waits for.
    pub fn handle_time(&mut self, now_us: u64, persister: &mut Persister) -> Result<()> {
        if self.plan.is_none() && now_us >= self.next_report_us {
            self.next_report_us = now_us + REPORT_RESEND_US;
            let msg = Msg::Report {
                report: self.report.clone(),
                address: self.address.clone(),
                group_id: self.config.group_id,
            };
            self.send(self.config.leader, msg);
        }
        if self.is_leader() && self.plan.is_none() {
            self.decide(now_us, persister)?;
        }
        if now_us >= self.next_notice_us && !self.go {
            self.next_notice_us = now_us + WAIT_NOTICE_US;
            tracing::warn!(node = self.me, "{}", self.waiting_for());
        }
        Ok(())
    }

    /// What this node waits for, in words.
    pub fn waiting_for(&self) -> String {
        match (&self.plan, self.is_leader()) {
            (None, true) => match restart_plan(&self.reports()) {
                RestartPlan::Wait {
                    last_vid,
                    have,
                    need,
                } => format!(
                    "restart: waiting for a majority of the last logged view {last_vid}: \
                     {have} of its members reported, {need} needed"
                ),
                RestartPlan::Restore { .. } => format!(
                    "restart: a majority reported; waiting up to {} ms for the rest of the \
                     last view's members",
                    self.config.grace_us / 1000
                ),
                RestartPlan::LastViewId => last_view_id_error(),
            },
            (None, false) => format!(
                "restart: waiting for the restart leader {} ({}) to decide",
                self.config.leader, self.config.leader_address
            ),
            (Some(_), _) if !self.fetching.is_empty() => format!(
                "restart: fetching the restored state of subgroups {:?}",
                self.fetching.keys().collect::<Vec<_>>()
            ),
            (Some(p), true) => format!(
                "restart: waiting for members {:?} to restore their logs",
                p.view
                    .members
                    .iter()
                    .filter(|m| !self.done.contains(m))
                    .collect::<Vec<_>>()
            ),
            (Some(_), false) => format!(
                "restart: waiting for the leader {}'s go",
                self.config.leader
            ),
        }
    }

    fn reports(&self) -> Vec<RestartReport> {
        self.reports.values().map(|(r, _)| r.clone()).collect()
    }

    fn decide(&mut self, now_us: u64, persister: &mut Persister) -> Result<()> {
        let reports = self.reports();
        let (vid, sources) = match restart_plan(&reports) {
            RestartPlan::Restore { vid, sources } => (vid, sources),
            RestartPlan::LastViewId => return Err(Error::Restart(last_view_id_error())),
            RestartPlan::Wait { .. } => {
                self.majority_at_us = None;
                return Ok(());
            }
        };
        let since = *self.majority_at_us.get_or_insert(now_us);
        let last_view = reports
            .iter()
            .filter_map(|r| r.last_view.as_ref())
            .max_by_key(|v| v.vid)
            .cloned()
            .unwrap_or_else(|| View::new(0, Vec::new()));
        let all = last_view
            .members
            .iter()
            .all(|m| self.reports.contains_key(m));
        if !all && now_us.saturating_sub(since) < self.config.grace_us {
            return Ok(());
        }
        let members: Vec<NodeId> = self.reports.keys().copied().collect();
        let plan = Plan {
            view: View::new(vid, members.clone()),
            addresses: self
                .reports
                .iter()
                .map(|(n, (_, a))| (*n, a.clone()))
                .collect(),
            sources,
        };
        tracing::info!(
            node = self.me,
            vid,
            members = ?members,
            sources = ?plan.sources,
            "restart: the leader decided"
        );
        let me = self.me;
        for m in members.iter().filter(|m| **m != me) {
            self.send(*m, Msg::Plan(plan.clone()));
        }
        self.take_plan(plan, persister)
    }

    /// The plan arrived (or the leader made it): fetch what this log lacks.
    fn take_plan(&mut self, plan: Plan, persister: &mut Persister) -> Result<()> {
        if self.plan.is_some() {
            return Ok(());
        }
        for (sg, (source, last)) in &plan.sources {
            let mine = persister.log(*sg).and_then(|l| l.last_version());
            if persister.log(*sg).is_none() {
                continue;
            }
            if *source == self.me || last.is_none() {
                // This log is the restored state (or there is none): nothing to fetch;
                // restore only cuts.
                let own: Vec<Entry> = match (mine, last) {
                    (Some(_), Some(l)) => read_range(persister, *sg, Some(*l), *last)?,
                    _ => Vec::new(),
                };
                persister.restore(*sg, *last, own)?;
                continue;
            }
            // From this log's last version (inclusive: the two must meet there), or its
            // cut point if it runs past the restored state.
            let from = mine.map(|m| m.min(last.unwrap_or_default()));
            self.fetching.insert(*sg, (*source, *last, Vec::new()));
            self.send(
                *source,
                Msg::Fetch {
                    subgroup: *sg,
                    from,
                    to: *last,
                },
            );
        }
        self.plan = Some(plan);
        self.maybe_done()
    }

    fn maybe_done(&mut self) -> Result<()> {
        if self.plan.is_some() && self.fetching.is_empty() && !self.sent_done {
            self.sent_done = true;
            if self.is_leader() {
                self.member_done(self.me);
            } else {
                self.send(self.config.leader, Msg::Done);
            }
        }
        Ok(())
    }

    fn member_done(&mut self, node: NodeId) {
        self.done.insert(node);
        let Some(p) = &self.plan else { return };
        if p.view.members.iter().all(|m| self.done.contains(m)) && !self.go {
            let others: Vec<NodeId> = p
                .view
                .members
                .iter()
                .copied()
                .filter(|m| *m != self.me)
                .collect();
            for m in others {
                self.send(m, Msg::Go);
            }
            self.go = true;
        }
    }

    /// A restart message from `peer`.
    pub fn handle_message(
        &mut self,
        peer: NodeId,
        bytes: &[u8],
        now_us: u64,
        persister: &mut Persister,
    ) -> Result<()> {
        let msg = Msg::decode(bytes)?;
        match msg {
            Msg::Report {
                report,
                address,
                group_id,
            } => {
                if !self.is_leader() {
                    return Ok(());
                }
                if report.node != peer {
                    return Err(Error::Protocol(format!(
                        "restart: node {peer} sent the report of node {}",
                        report.node
                    )));
                }
                if group_id != self.config.group_id {
                    let label = self.config.group_label;
                    tracing::warn!(
                        node = self.me,
                        peer,
                        theirs = %label(group_id),
                        mine = %label(self.config.group_id),
                        "restart: a report of another group, refused"
                    );
                    let group_id = self.config.group_id;
                    self.send(peer, Msg::Refused { group_id });
                    return Ok(());
                }
                if let Some(p) = &self.plan {
                    // A member that reports after the decision is not in the view: it
                    // gets the plan all the same, which tells it to join the domain as a
                    // new member (state transfer brings its log to the domain's; see
                    // `Persister`'s state install). After GO the leader's group ignores
                    // reports, and the late member's restart times out: it joins then.
                    if !p.view.members.contains(&peer) {
                        tracing::warn!(
                            node = self.me,
                            peer,
                            "restart: a report after the decision; it must join the domain"
                        );
                        if self.late.len() < LATE_MEMBERS_MAX {
                            self.late.insert(peer, address);
                        }
                    }
                    let p = p.clone();
                    self.send(peer, Msg::Plan(p));
                    return Ok(());
                }
                self.reports.insert(peer, (report, address));
                self.decide(now_us, persister)
            }
            Msg::Plan(p) => {
                if peer != self.config.leader {
                    return Err(Error::Protocol(format!(
                        "restart: a plan from node {peer}, not the leader {}",
                        self.config.leader
                    )));
                }
                if !p.view.members.contains(&self.me) {
                    return Err(Error::Restart(format!(
                        "the restart leader restarted the domain in view {} without this \
                         node ({:?}); join it as a new member",
                        p.view.vid, p.view.members
                    )));
                }
                self.take_plan(p, persister)
            }
            Msg::Fetch { subgroup, from, to } => {
                let entries = read_range(persister, subgroup, from, to)?;
                let mut chunk = Vec::new();
                let mut bytes = 0usize;
                for e in entries {
                    if bytes + e.payload.len() > CHUNK_BYTES_MAX && !chunk.is_empty() {
                        self.send(
                            peer,
                            Msg::Entries {
                                subgroup,
                                last: false,
                                entries: std::mem::take(&mut chunk),
                            },
                        );
                        bytes = 0;
                    }
                    bytes += e.payload.len();
                    chunk.push(e);
                }
                self.send(
                    peer,
                    Msg::Entries {
                        subgroup,
                        last: true,
                        entries: chunk,
                    },
                );
                Ok(())
            }
            Msg::Entries {
                subgroup,
                last,
                entries,
            } => {
                // Only the source the plan names ships a subgroup's entries.
                let Some((_, _, got)) = self
                    .fetching
                    .get_mut(&subgroup)
                    .filter(|(source, _, _)| *source == peer)
                else {
                    return Ok(());
                };
                got.extend(entries);
                if last {
                    if let Some((_, to, got)) = self.fetching.remove(&subgroup) {
                        persister.restore(subgroup, to, got)?;
                    }
                    self.maybe_done()?;
                }
                Ok(())
            }
            Msg::Done => {
                if self.is_leader() {
                    self.member_done(peer);
                }
                Ok(())
            }
            Msg::Go => {
                if peer == self.config.leader && self.plan.is_some() && self.sent_done {
                    self.go = true;
                }
                Ok(())
            }
            Msg::Refused { group_id } if peer == self.config.leader => {
                let label = self.config.group_label;
                Err(Error::Restart(format!(
                    "the restart leader, node {peer}, is configured for {}, this node for {}: \
                     it refused this node's report",
                    label(group_id),
                    label(self.config.group_id)
                )))
            }
            // Only the leader answers reports.
            Msg::Refused { .. } => Ok(()),
        }
    }

    /// The next message to send: (to, bytes).
    pub fn poll_send(&mut self) -> Option<(NodeId, Vec<u8>)> {
        if self.out.is_empty() {
            return None;
        }
        let (to, m) = self.out.remove(0);
        Some((to, m.encode()))
    }
}

/// Subgroup `sg`'s entries from `from` (inclusive; `None`: the first) to `to`
/// (inclusive; `None`: nothing).
fn read_range(
    persister: &mut Persister,
    sg: SubgroupId,
    from: Option<Version>,
    to: Option<Version>,
) -> Result<Vec<Entry>> {
    let (Some(log), Some(to)) = (persister.log_mut(sg), to) else {
        return Ok(Vec::new());
    };
    let from = from.unwrap_or_default();
    if from > to {
        return Ok(Vec::new());
    }
    Ok(log
        .range(from..=to)?
        .collect::<spindle_log::Result<Vec<_>>>()?)
}

/// How long the driver waits on the endpoint between looks.
const POLL: Duration = Duration::from_millis(5);

/// Why a domain whose last logged view is the last view id cannot restart.
fn last_view_id_error() -> String {
    format!(
        "restart: the last logged view is {}, the last view id: no view can follow it, so \
         the domain cannot restart (a member's report or log carries it)",
        u32::MAX
    )
}

/// Runs this node's part of a restart after total failure over `ep` until GO, or until
/// `config.timeout` passes ([`Error::Restart`], saying what it waited for). Returns the
/// plan: start the group with [`crate::Group::bootstrap`] in `plan.view` with
/// `plan.addresses`.
pub fn run(ep: &dyn Endpoint, config: RestartConfig, persister: &mut Persister) -> Result<Plan> {
    let start = Instant::now();
    let timeout = config.timeout;
    let mut r = Restart::new(ep.node(), ep.address(), config, persister)?;
    let mut held: Vec<(NodeId, Vec<u8>)> = Vec::new();
    loop {
        let now_us = start.elapsed().as_micros() as u64;
        r.handle_time(now_us, persister)?;
        while let Some(ev) = ep.poll_event() {
            if let Event::Recv { peer, imm, data } = ev {
                if imm == RESTART_IMM {
                    if let Err(e) = r.handle_message(peer, &data, now_us, persister) {
                        if matches!(e, Error::Restart(_) | Error::Log(_)) {
                            return Err(e);
                        }
                        tracing::warn!(peer, error = %e, "restart: bad message dropped");
                    }
                }
            }
        }
        // Messages to self go straight in; others out over the fabric, dialing first.
        while let Some((to, bytes)) = r.poll_send() {
            held.push((to, bytes));
        }
        let mut still = Vec::new();
        for (to, bytes) in held.drain(..) {
            if to == r.me {
                r.handle_message(to, &bytes, now_us, persister)?;
                continue;
            }
            if ep.send(to, RESTART_IMM, &bytes).is_err() {
                let Some(a) = r.address_of(to).map(str::to_string) else {
                    // Nowhere to dial: it can never go (and must not hold the end up).
                    tracing::warn!(peer = to, "restart: no address; message dropped");
                    continue;
                };
                let _ = ep.connect(to, &a);
                // A report is re-sent by the protocol; everything else waits for the link.
                if bytes.first().is_none_or(|k| *k != 1) {
                    still.push((to, bytes));
                }
            }
        }
        held = still;
        if let Some(p) = r.finished() {
            if held.is_empty() {
                return Ok(p.clone());
            }
        }
        if start.elapsed() >= timeout {
            return Err(Error::Restart(format!(
                "gave up after {} ms: {}",
                timeout.as_millis(),
                r.waiting_for()
            )));
        }
        ep.wait(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_roundtrip_and_bad_bytes_are_errors() {
        let mut tails = BTreeMap::new();
        tails.insert(3, Some(Version::new(2, 9)));
        tails.insert(4, None);
        let msgs = vec![
            Msg::Report {
                report: RestartReport {
                    node: 2,
                    last_view: Some(View::new(5, vec![1, 2, 3])),
                    tails,
                },
                address: "127.0.0.1:7000".into(),
                group_id: (2 << 32) | 7,
            },
            Msg::Refused { group_id: 9 },
            Msg::Plan(Plan {
                view: View::new(6, vec![1, 2]),
                addresses: [(1, "a".to_string()), (2, "b".to_string())].into(),
                sources: [(3, (2, Some(Version::new(5, 1)))), (4, (1, None))].into(),
            }),
            Msg::Fetch {
                subgroup: 3,
                from: None,
                to: Some(Version::new(5, 1)),
            },
            Msg::Entries {
                subgroup: 3,
                last: true,
                entries: vec![Entry {
                    meta: EntryMeta {
                        version: Version::new(5, 0),
                        writer: 2,
                        timestamp_us: 77,
                    },
                    payload: b"abc".to_vec(),
                }],
            },
            Msg::Done,
            Msg::Go,
        ];
        for m in msgs {
            let b = m.encode();
            assert_eq!(Msg::decode(&b).unwrap(), m);
            for cut in 0..b.len() {
                assert!(Msg::decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(Msg::decode(&longer).is_err());
        }
        assert!(Msg::decode(&[9]).is_err());
        // A count past its bound is refused before anything is allocated.
        let mut b = vec![2, 1, 0, 0, 0];
        b.extend_from_slice(&u16::MAX.to_le_bytes());
        assert!(Msg::decode(&b).is_err());
    }
}
