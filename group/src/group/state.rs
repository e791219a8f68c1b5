//! Who ships which subgroup's state to whom across a view change: a pure function of
//! the layout and the holders.

use std::collections::BTreeMap;

use spindle_transport_rdma::NodeId;

use crate::layout::{Layout, SubgroupId, View};

/// Who ships which subgroup's state to whom when `view` (with `layout`, `None` if
/// inadequate) follows a view whose state holders were `holders`, with `joined` new in
/// `view` (a joiner holds nothing, even under the id of a member just removed): every
/// member of a subgroup that does not hold its state gets it from the lowest-ranked holder
/// still in the view. Returns the plan and the holders after it.
#[allow(clippy::type_complexity)]
pub fn state_plan(
    layout: Option<&Layout>,
    view: &View,
    holders: &BTreeMap<SubgroupId, Vec<NodeId>>,
    joined: &[NodeId],
) -> (
    Vec<(SubgroupId, NodeId, NodeId)>,
    BTreeMap<SubgroupId, Vec<NodeId>>,
) {
    let mut next: BTreeMap<SubgroupId, Vec<NodeId>> = holders
        .iter()
        .map(|(sg, h)| {
            (
                *sg,
                h.iter()
                    .copied()
                    .filter(|m| view.members.contains(m) && !joined.contains(m))
                    .collect(),
            )
        })
        .collect();
    let mut plan = Vec::new();
    let Some(layout) = layout else {
        return (plan, next);
    };
    for sg in &layout.subgroups {
        let h = next.get(&sg.id).cloned().unwrap_or_default();
        if let Some(giver) = view.members.iter().find(|m| h.contains(m)) {
            for m in sg.members.iter().filter(|m| !h.contains(m)) {
                plan.push((sg.id, *giver, *m));
            }
        }
        next.insert(sg.id, sg.members.clone());
    }
    (plan, next)
}

/// What `me` awaits after a view change whose state-transfer plan is `plan`: each
/// subgroup whose state it receives, with the member the plan names as its giver.
pub(crate) fn awaited_states(
    plan: &[(SubgroupId, NodeId, NodeId)],
    me: NodeId,
) -> BTreeMap<SubgroupId, NodeId> {
    plan.iter()
        .filter(|(_, _, receiver)| *receiver == me)
        .map(|(sg, giver, _)| (*sg, *giver))
        .collect()
}

/// What a node that awaits `awaited` does with a state of `subgroup` sent by `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateVerdict {
    /// The planned giver's: installed.
    Install,
    /// Awaited, but from another member than the planned `giver`: refused (a peer's
    /// state is taken only from the member the view's plan names).
    NotTheGiver {
        /// The member the plan names.
        giver: NodeId,
    },
    /// Not awaited (already installed, or never planned): ignored.
    NotAwaited,
}

/// [`StateVerdict`] of a state of `subgroup` from `from`, for a node awaiting `awaited`.
pub(crate) fn state_verdict(
    awaited: &BTreeMap<SubgroupId, NodeId>,
    subgroup: SubgroupId,
    from: NodeId,
) -> StateVerdict {
    match awaited.get(&subgroup) {
        Some(giver) if *giver == from => StateVerdict::Install,
        Some(giver) => StateVerdict::NotTheGiver { giver: *giver },
        None => StateVerdict::NotAwaited,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{DeliveryMode, SubgroupSpec};

    fn subgroup(id: SubgroupId, members: Vec<NodeId>) -> SubgroupSpec {
        SubgroupSpec {
            id,
            senders: members.clone(),
            members,
            mode: DeliveryMode::Atomic,
            window_slots: 4,
            slot_payload_bytes: 64,
            rdmc: None,
            delivery_prefix: None,
        }
    }

    #[test]
    fn a_joiner_takes_a_state_only_from_the_giver_the_plan_names() {
        // Members 1 and 2 held subgroup 0; 3 joins it in view 2.
        let holders = BTreeMap::from([(0, vec![1, 2])]);
        let layout = Layout {
            subgroups: vec![subgroup(0, vec![1, 2, 3])],
        };
        let view = View::new(2, vec![1, 2, 3]);
        let (plan, _) = state_plan(Some(&layout), &view, &holders, &[3]);
        let awaited = awaited_states(&plan, 3);
        assert_eq!(awaited, BTreeMap::from([(0, 1)]), "plan {plan:?}");
        assert_eq!(state_verdict(&awaited, 0, 1), StateVerdict::Install);
        // Another member (a holder too, but not the planned giver) and a non-holder.
        assert_eq!(
            state_verdict(&awaited, 0, 2),
            StateVerdict::NotTheGiver { giver: 1 }
        );
        assert_eq!(
            state_verdict(&awaited, 0, 3),
            StateVerdict::NotTheGiver { giver: 1 }
        );
        assert_eq!(state_verdict(&awaited, 7, 1), StateVerdict::NotAwaited);
        // The givers await nothing.
        assert!(awaited_states(&plan, 1).is_empty() && awaited_states(&plan, 2).is_empty());
    }
}
