//! Membership messages a peer sends about others: a join for another node, a redirect
//! from a node the joiner never asked. Driven by hand on the sim fabric.

use std::collections::BTreeMap;
use std::sync::Arc;

use spindle_transport_rdma::sim::{SimConfig, SimWorld};
use spindle_transport_rdma::{Endpoint, Event, NodeId};

use super::wire::Msg;
use super::{Group, GroupAction, GroupConfig, Phase, JOIN_CONTACTS_MAX, MEMBERSHIP_IMM};
use crate::layout::{Layout, View};

fn config() -> GroupConfig {
    GroupConfig::new(Arc::new(|v: &View| Ok(Layout::one_subgroup(v, 0, 4, 64))))
}

fn recv(peer: NodeId, msg: Msg) -> Event {
    Event::Recv {
        peer,
        imm: MEMBERSHIP_IMM,
        data: msg.encode(),
    }
}

/// The nodes the leader was asked to connect to while it ran `rounds` rounds.
fn connects(g: &mut Group, ep: &dyn super::LocalFabric, rounds: u64) -> Vec<NodeId> {
    let mut out = Vec::new();
    for t in 0..rounds {
        g.handle_time(ep, 1_000 * (t + 1));
        while let Some(a) = g.poll_action() {
            if let GroupAction::Connect { peer, .. } = a {
                out.push(peer);
            }
        }
    }
    out
}

#[test]
fn a_join_request_for_another_node_is_refused() {
    let world = SimWorld::new(1, SimConfig::default());
    let ep = world.endpoint(1);
    let addresses = BTreeMap::from([(1, ep.address())]);
    let mut g = Group::bootstrap(&*ep, View::new(1, vec![1]), addresses, config(), 0).unwrap();
    while g.poll_action().is_some() {}
    // Node 3 asks for node 5: nothing happens.
    let forged = Msg::Join {
        node: 5,
        address: "sim:5".into(),
        group_id: 0,
    };
    g.handle_event(&*ep, recv(3, forged), 0);
    assert!(
        !connects(&mut g, &*ep, 20).contains(&5),
        "the leader admitted a node on another's word"
    );
    // Node 3 asking for itself is heard (the leader links to it for the new view).
    let own = Msg::Join {
        node: 3,
        address: "sim:3".into(),
        group_id: 0,
    };
    g.handle_event(&*ep, recv(3, own), 0);
    assert!(
        connects(&mut g, &*ep, 20).contains(&3),
        "a node's own join is heard"
    );
}

#[test]
fn a_redirect_from_a_node_not_asked_is_ignored_and_contacts_stay_bounded() {
    let world = SimWorld::new(2, SimConfig::default());
    let ep = world.endpoint(9);
    let mut g = Group::join(&*ep, vec![(1, "sim:1".into())], config()).unwrap();
    let contacts = |g: &Group| match &g.phase {
        Phase::Joining { contacts, .. } => contacts.clone(),
        _ => panic!("still joining"),
    };
    // Not a contact: ignored.
    let from_stranger = Msg::Redirect {
        leader: 7,
        address: "sim:7".into(),
    };
    g.handle_event(&*ep, recv(4, from_stranger), 0);
    assert_eq!(contacts(&g), vec![(1, "sim:1".to_string())]);
    // From the contact: the leader goes first.
    let redirect = Msg::Redirect {
        leader: 2,
        address: "sim:2".into(),
    };
    g.handle_event(&*ep, recv(1, redirect), 0);
    assert_eq!(contacts(&g)[0], (2, "sim:2".to_string()));
    // A contact redirecting to ever new leaders cannot grow the list past the bound.
    for leader in 10..(10 + 2 * JOIN_CONTACTS_MAX as NodeId) {
        let msg = Msg::Redirect {
            leader,
            address: format!("sim:{leader}"),
        };
        g.handle_event(&*ep, recv(1, msg), 0);
    }
    assert!(contacts(&g).len() <= JOIN_CONTACTS_MAX);
    // An over-long address is not taken.
    let long = Msg::Redirect {
        leader: 3,
        address: "x".repeat(crate::membership::ADDRESS_BYTES_MAX + 1),
    };
    g.handle_event(&*ep, recv(1, long), 0);
    assert!(contacts(&g).iter().all(|(c, _)| *c != 3));
}

#[test]
fn a_joiner_of_another_group_is_refused_and_stops_naming_both_groups() {
    let world = SimWorld::new(3, SimConfig::default());
    let ep = world.endpoint(1);
    let addresses = BTreeMap::from([(1, ep.address())]);
    let mut member = Group::bootstrap(&*ep, View::new(1, vec![1]), addresses, config(), 0).unwrap();
    while member.poll_action().is_some() {}
    // Node 3, configured for group 7, asks to join group 0: refused, not admitted.
    let join = Msg::Join {
        node: 3,
        address: "sim:3".into(),
        group_id: 7,
    };
    member.handle_event(&*ep, recv(3, join), 0);
    let mut refusals = Vec::new();
    let mut admitted = false;
    for t in 0..20 {
        member.handle_time(&*ep, 1_000 * (t + 1));
        while let Some(a) = member.poll_action() {
            match a {
                GroupAction::Send { peer: 3, bytes, .. } => {
                    refusals.push(Msg::decode(&bytes).unwrap())
                }
                GroupAction::Connect { peer: 3, .. } => admitted = true,
                _ => {}
            }
        }
    }
    assert_eq!(refusals, vec![Msg::Refused { group_id: 0 }]);
    assert!(!admitted, "a joiner of another group was let in");
    // The joiner stops when its contact refuses it, naming both groups; a refusal from a
    // node it did not ask is ignored.
    let jep = world.endpoint(3);
    let mut cfg = config();
    cfg.group_id = 7;
    let mut joiner = Group::join(&*jep, vec![(1, "sim:1".into())], cfg).unwrap();
    joiner.handle_event(&*jep, recv(4, Msg::Refused { group_id: 0 }), 0);
    assert!(
        matches!(joiner.phase, Phase::Joining { .. }),
        "a stranger's refusal counts"
    );
    joiner.handle_event(&*jep, recv(1, Msg::Refused { group_id: 0 }), 0);
    let mut why = None;
    while let Some(o) = joiner.poll() {
        if let crate::group::GroupOutput::ShutDown(w) = o {
            why = Some(w);
        }
    }
    let why = why.expect("the joiner stopped");
    assert!(
        why.contains("member of group 0") && why.contains("configured for group 7"),
        "{why}"
    );
}
