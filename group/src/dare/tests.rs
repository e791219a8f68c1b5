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
