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
