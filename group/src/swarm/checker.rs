//! Every invariant the swarm checks, in one place. The [`Checker`] records violations
//! (it never panics), as the run goes and at its end:
//!
//! * per delivery: the payload is readable, intact and of its subgroup; no duplicate; each
//!   sender's order kept;
//! * per view: view ids increase at every node; one membership per view id (no split
//!   brain); each view holds a majority of the previous one;
//! * at the end: members that pass from view v to v+1 delivered the same messages in v in
//!   every atomic subgroup and the dare subgroup (virtual synchrony; for DARE: the
//!   hand-off ends the view's instance at one index everywhere); one total order per
//!   atomic subgroup and in the dare subgroup across views (every node's sequence is a
//!   prefix of the longest, so nothing past an agreed trim or hand-off was ever
//!   delivered, and no committed entry was lost to an election or a view change).

use std::collections::BTreeMap;

use spindle_transport_rdma::NodeId;

use super::{parse_payload, payload, MsgId, NodeRun, SG_ALL, SG_DARE, SG_TAIL};
use crate::layout::{SubgroupId, View};

/// Violations a run keeps (the first ones; later ones add nothing to a diagnosis).
pub const VIOLATIONS_KEPT: usize = 20;

/// Collects safety violations as they are seen.
#[derive(Debug, Default)]
pub struct Checker {
    /// What went wrong.
    pub violations: Vec<String>,
    views: BTreeMap<u32, View>,
}

impl Checker {
    /// Records a violation (the first [`VIOLATIONS_KEPT`]).
    pub(crate) fn violation(&mut self, v: String) {
        if self.violations.len() < VIOLATIONS_KEPT {
            self.violations.push(v);
        }
    }

    /// A view installed at `node`, whose previous view there was `last`: view ids
    /// increase at every node; one membership per view id (no split brain); each view
    /// holds a majority of the previous one.
    pub(crate) fn view_at(&mut self, node: NodeId, view: &View, last: Option<&View>) {
        if let Some(last) = last {
            if view.vid <= last.vid {
                self.violation(format!(
                    "node {node}: view {} installed after view {}",
                    view.vid, last.vid
                ));
            }
        }
        match self.views.get(&view.vid) {
            Some(m) if m.members != view.members || m.declared != view.declared => {
                let v = format!(
                    "split brain: view {} installed as {:?} and as {:?}",
                    view.vid, m, view
                );
                self.violation(v);
            }
            Some(_) => {}
            None => {
                if let Some(prev) = self.views.get(&(view.vid.wrapping_sub(1))) {
                    let kept = view
                        .members
                        .iter()
                        .filter(|m| prev.members.contains(m))
                        .count();
                    if kept * 2 <= prev.members.len() {
                        let v = format!(
                            "view {} {:?} holds no majority of view {} {:?}",
                            view.vid,
                            view.members,
                            view.vid - 1,
                            prev.members
                        );
                        self.violation(v);
                    }
                }
                self.views.insert(view.vid, view.clone());
            }
        }
    }

    /// A delivery at `node` in view `vid` of subgroup `sg`, whose delivered sequence so
    /// far is `delivered`: the payload is readable, intact and of this subgroup; not a
    /// duplicate; its sender's order kept. The message, if readable.
    pub(crate) fn delivery(
        &mut self,
        node: NodeId,
        vid: u32,
        sg: SubgroupId,
        bytes: &[u8],
        delivered: &[MsgId],
    ) -> Option<MsgId> {
        let Some((msg, psg)) = parse_payload(bytes) else {
            self.violation(format!("node {node}: unreadable payload in {sg}"));
            return None;
        };
        if psg != sg || payload(msg, sg, bytes.len()) != bytes {
            self.violation(format!(
                "node {node}: payload of {msg:?} corrupted or in the wrong subgroup"
            ));
        }
        if delivered.contains(&msg) {
            self.violation(format!(
                "node {node}: {msg:?} delivered twice in subgroup {sg} (view {vid})"
            ));
        }
        if let Some(prev) = delivered
            .iter()
            .rev()
            .find(|p| p.0 == msg.0 && p.1 == msg.1)
        {
            if prev.2 > msg.2 {
                self.violation(format!(
                    "node {node}: sender order broken in {sg}: {prev:?} before {msg:?}"
                ));
            }
        }
        Some(msg)
    }

    /// After the run, over every node run (past incarnations too): virtual synchrony
    /// per view, and one order per atomic subgroup.
    pub(crate) fn runs(&mut self, all: &[&NodeRun]) {
        // Virtual synchrony: members that passed from v to v+1 delivered the same in v.
        type Lists<'a> = Vec<(NodeId, &'a Vec<MsgId>)>;
        let mut by_view: BTreeMap<(u32, SubgroupId), Lists<'_>> = BTreeMap::new();
        let empty = Vec::new();
        let mut violations = Vec::new();
        for n in all {
            for w in n.views.windows(2) {
                let (v, next) = (&w[0], &w[1]);
                if next.vid != v.vid + 1 {
                    continue;
                }
                let Some(mine) = n.subgroups_in.get(&v.vid) else {
                    continue;
                };
                for sg in [SG_ALL, SG_TAIL, SG_DARE]
                    .into_iter()
                    .filter(|s| mine.contains(s))
                {
                    let list = n.per_view.get(&(v.vid, sg)).unwrap_or(&empty);
                    by_view.entry((v.vid, sg)).or_default().push((n.id, list));
                }
            }
        }
        for ((vid, sg), lists) in &by_view {
            if let Some((first, l0)) = lists.first() {
                for (other, l) in &lists[1..] {
                    if l != l0 {
                        violations.push(format!(
                            "virtual synchrony: in view {vid}, subgroup {sg}, nodes {first} and \
                             {other} moved on after delivering {} and {} messages that differ",
                            l0.len(),
                            l.len()
                        ));
                    }
                }
            }
        }
        // One total order per atomic subgroup: every node's sequence is a prefix of the
        // longest one.
        for sg in [SG_ALL, SG_TAIL, SG_DARE] {
            let longest = all
                .iter()
                .filter_map(|n| n.state.get(&sg))
                .max_by_key(|l| l.len())
                .cloned()
                .unwrap_or_default();
            for n in all {
                if let Some(l) = n.state.get(&sg) {
                    if longest[..l.len()] != l[..] {
                        violations.push(format!(
                            "total order: node {} (incarnation {}) delivered in subgroup {sg} a \
                             sequence that is not a prefix of the longest",
                            n.id, n.incarnation
                        ));
                    }
                }
            }
        }
        for v in violations {
            self.violation(v);
        }
    }
}
