//! Unit tests of the DARE core.

use super::layout::log_region_id;
use super::layout::DARE_CTRL_REGION_ID;
use super::*;

fn node(me: NodeId, members: Vec<NodeId>, config: DareConfig) -> DareNode {
    let ctrl = Region::new_heap(
        DARE_CTRL_REGION_ID,
        DareNode::ctrl_region_bytes(members.len()),
    )
    .expect("region");
    DareNode::new(me, members, config, ctrl, 7).expect("node")
}

fn heap_rekey(_old: Option<RegionId>, new: RegionId, len: usize) -> Result<Region> {
    Ok(Region::new_heap(new, len)?)
}

#[test]
fn bad_settings_name_the_field() {
    for (config, field) in [
        (
            DareConfig {
                log_entries: 1,
                ..DareConfig::default()
            },
            "log_entries",
        ),
        (
            DareConfig {
                sender_window: 0,
                ..DareConfig::default()
            },
            "sender_window",
        ),
        (
            DareConfig {
                election_timeout_us: 1,
                ..DareConfig::default()
            },
            "election_timeout_us",
        ),
    ] {
        let e = config.validate().expect_err("invalid").to_string();
        assert!(e.contains(field), "{e}");
    }
    let ctrl = Region::new_heap(1, 1024).expect("region");
    let e = DareNode::new(9, vec![1, 2], DareConfig::default(), ctrl, 0)
        .expect_err("not a member")
        .to_string();
    assert!(e.contains("node 9"), "{e}");
}

#[test]
fn malformed_messages_from_peers_are_errors_not_panics() {
    let mut n = node(1, vec![1, 2, 3], DareConfig::default());
    assert!(n.handle_recv(9, &[0; 16]).is_err(), "not a member");
    assert!(
        n.handle_recv(2, &[0; 3]).is_err(),
        "shorter than its header"
    );
    let too_long = vec![0; DARE_SEND_HEADER_BYTES + DareConfig::default().payload_bytes_max + 1];
    assert!(
        n.handle_recv(2, &too_long).is_err(),
        "beyond the payload bound"
    );
    // Well-formed, to a member that is not the leader: dropped without error.
    assert!(n.handle_recv(2, &[1, 0, 0, 0, 0, 0, 0, 0, 42]).is_ok());
}

#[test]
fn a_sender_is_bounded_by_its_window_and_the_payload_bound() {
    let config = DareConfig {
        sender_window: 2,
        payload_bytes_max: 4,
        ..DareConfig::default()
    };
    let mut n = node(1, vec![1, 2, 3], config);
    assert!(matches!(
        n.send(b"12345"),
        Err(Error::PayloadTooLarge { len: 5, max: 4 })
    ));
    assert_eq!(n.send(b"a").expect("room"), 1);
    assert_eq!(n.send(b"b").expect("room"), 2);
    assert!(!n.can_send());
    assert!(matches!(
        n.send(b"c"),
        Err(Error::DareWindowFull { window: 2 })
    ));
}

#[test]
fn a_group_of_one_elects_itself_and_delivers_in_order() {
    let mut n = node(5, vec![5], DareConfig::default());
    for m in [&b"first"[..], b"second", b"third"] {
        n.send(m).expect("room");
    }
    let mut got = Vec::new();
    let mut now_us = 0;
    while got.len() < 3 && now_us < 1_000_000 {
        n.step(now_us, &mut heap_rekey).expect("step");
        while let Some(d) = n.poll_delivery() {
            got.push((d.index, d.sender_seq, d.payload));
        }
        now_us += 1_000;
    }
    assert_eq!(n.role(), DareRole::Leader);
    assert_eq!(n.term(), 1);
    assert_eq!(
        got,
        vec![
            (1, 1, b"first".to_vec()),
            (2, 2, b"second".to_vec()),
            (3, 3, b"third".to_vec())
        ]
    );
    assert_eq!(n.log_region_id(), Some(log_region_id(1)));
    assert_eq!(n.pending(), 0);
}

#[test]
fn an_instance_of_a_later_view_keys_its_regions_anew() {
    let ctrl = Region::new_heap(77, DareNode::ctrl_region_bytes(1)).expect("region");
    let mut n = DareNode::new(5, vec![5], DareConfig::default(), ctrl, 7)
        .expect("node")
        .with_first_term(9)
        .expect("first term");
    n.send(b"carried over").expect("room");
    let mut got = Vec::new();
    let mut now_us = 0;
    while got.is_empty() && now_us < 1_000_000 {
        n.step(now_us, &mut heap_rekey).expect("step");
        got.extend(std::iter::from_fn(|| n.poll_delivery()));
        now_us += 1_000;
    }
    assert_eq!(
        n.term(),
        10,
        "the first election is one past the first term"
    );
    assert_eq!(n.log_region_id(), Some(log_region_id(10)));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, b"carried over");
    assert!(n.with_first_term(3).is_err(), "already started");
    let ctrl = Region::new_heap(78, DareNode::ctrl_region_bytes(1)).expect("region");
    let late = DareNode::new(5, vec![5], DareConfig::default(), ctrl, 7).expect("node");
    assert!(late.with_first_term(DARE_TERM_MAX + 1).is_err());
}

// Peer-written words (a faulty leader's log entries and commit, another member's
// heartbeat, a follower's `applied`) stop the member with an error, never a panic.

/// Member `me` of nodes 1, 2, 3, stepped once at time 0: its log region is registered
/// (term 0) and no election is due yet.
fn started(me: NodeId) -> DareNode {
    let mut n = node(me, vec![1, 2, 3], DareConfig::default());
    n.step(0, &mut heap_rekey).expect("first step");
    n
}

/// Writes `e` into `n`'s log as a leader would, and `commit` = `e.index`.
fn plant_committed(n: &DareNode, e: &Entry) {
    n.log
        .write_bytes(n.log_layout.slot(e.index), &DareNode::entry_bytes(e))
        .expect("write entry");
    n.log.store_u64(LOG_COMMIT_OFFSET, e.index);
}

/// Member 1 of nodes 1, 2, 3 made leader of its first term by crafted grants.
fn leader() -> DareNode {
    let mut n = started(1);
    let mut now_us = 0;
    while n.role() != DareRole::Candidate {
        now_us += 1_000;
        assert!(now_us < 10_000_000, "no election: {}", n.describe());
        n.step(now_us, &mut heap_rekey).expect("step");
    }
    let term = n.term();
    n.ctrl.store_u64(n.ctrl_layout.grant(1), term);
    n.step(now_us, &mut heap_rekey).expect("step");
    assert_eq!(n.role(), DareRole::Leader, "{}", n.describe());
    n
}

/// A started leader (rank 0) whose log holds, committed at index 1, a forged entry of
/// `sender`'s message `sender_seq`; the member and the error its next step returns.
fn step_with_forged_commit(sender: NodeId, sender_seq: u64) -> (DareNode, String) {
    let mut n = started(1);
    plant_committed(
        &n,
        &Entry {
            index: 1,
            term: 0,
            sender,
            sender_seq,
            payload: b"forged".to_vec(),
        },
    );
    let e = n
        .step(1, &mut heap_rekey)
        .expect_err("a forged committed entry")
        .to_string();
    (n, e)
}

#[test]
fn a_committed_entry_out_of_its_senders_sequence_is_an_error_not_a_panic() {
    let (mut n, e) = step_with_forged_commit(1, 5);
    assert!(
        e.contains("committed entry 1") && e.contains("message 5 of node 2, expected 1"),
        "{e}"
    );
    assert!(n.stopped().is_some());
    assert_eq!(n.applied(), 0, "nothing delivered past the bad entry");
    assert_eq!(n.poll_delivery(), None);
}

#[test]
fn a_committed_entry_claiming_an_own_message_never_sent_is_an_error_not_a_panic() {
    // Rank 0 is this member; it sent nothing.
    let (n, e) = step_with_forged_commit(0, 1);
    assert!(e.contains("entry 1") && e.contains("own message 1"), "{e}");
    assert!(n.stopped().is_some());
    assert_eq!(n.applied(), 0);
}

#[test]
fn a_leader_hearing_another_leader_of_its_term_stops_with_an_error_not_a_panic() {
    let mut n = leader();
    let term = n.term();
    n.ctrl.store_u64(n.ctrl_layout.hb(2), pack(term, 1));
    let e = n
        .step(20_000_000, &mut heap_rekey)
        .expect_err("two leaders")
        .to_string();
    assert!(e.contains("two leaders") && e.contains("node 3"), "{e}");
    assert!(n.stopped().is_some());
}

#[test]
fn a_follower_hearing_a_second_leader_of_its_term_stops_with_an_error_not_a_panic() {
    let mut n = started(1);
    n.ctrl.store_u64(n.ctrl_layout.hb(1), pack(1, 1));
    n.step(1, &mut heap_rekey).expect("step");
    assert_eq!(n.leader(), Some(2));
    n.ctrl.store_u64(n.ctrl_layout.hb(2), pack(1, 1));
    let e = n
        .step(2, &mut heap_rekey)
        .expect_err("two leaders")
        .to_string();
    assert!(
        e.contains("two leaders") && e.contains("node 2") && e.contains("node 3"),
        "{e}"
    );
    assert!(n.stopped().is_some());
}

#[test]
fn a_followers_applied_word_at_the_top_of_the_range_leaves_it_out_not_a_panic() {
    let mut n = leader();
    let term = n.term();
    while n.poll_event().is_some() {}
    n.ctrl.store_u64(n.ctrl_layout.applied(1), u64::MAX);
    n.ctrl.store_u64(n.ctrl_layout.hello(1), pack(term, 0));
    n.handle_region_announced(2, n.log_id(term));
    n.step(20_000_000, &mut heap_rekey).expect("step");
    let events: Vec<DareEvent> = std::iter::from_fn(|| n.poll_event()).collect();
    assert!(
        events.contains(&DareEvent::Lagging { peer: 2 }),
        "{events:?}"
    );
    assert!(n.stopped().is_none());
}
