//! The group's two-sided membership messages (join, redirect, new view, declaration,
//! state) and their byte format: one kind byte, then little-endian fields; strings and
//! lists carry a `u16` length. Decoding bytes from a peer never panics: every read is
//! bounds-checked and every length checked against its bound, and a bad message is an
//! [`Error::Protocol`] that names what is wrong.

use std::collections::BTreeMap;

use spindle_transport_rdma::NodeId;

use crate::dare::{DareDelivery, DARE_PAYLOAD_BYTES_MAX};
use crate::error::{Error, Result};
use crate::layout::{SubgroupId, View, DECLARED_BYTES_MAX};

const MSG_JOIN: u8 = 1;
const MSG_REDIRECT: u8 = 2;
const MSG_NEW_VIEW: u8 = 3;
const MSG_STATE: u8 = 4;
const MSG_DECLARE: u8 = 5;
const MSG_DARE_ENTRIES: u8 = 6;
const MSG_REFUSED: u8 = 7;

/// The view a member sends to the joiners it admits: its first member sends it, and only
/// a joiner enters a view from one (`Group::new_view`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewView {
    /// The view (members in rank order, their declarations).
    pub(crate) view: View,
    /// Every member's fabric address, in the view's order.
    pub(crate) addresses: Vec<(NodeId, String)>,
    /// Per subgroup, the members that held its state before this view (joiners excluded).
    pub(crate) holders: BTreeMap<SubgroupId, Vec<NodeId>>,
    /// The first term of every dare instance of this view (one past every term any dare
    /// subgroup reported at any earlier view change): a joiner's instances must take the
    /// survivors' term, whose log region ids they key.
    pub(crate) dare_first_term: u64,
}

/// One membership message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg {
    /// A node asks to join (sent to any member).
    Join {
        /// The joiner.
        node: NodeId,
        /// Its fabric address.
        address: String,
        /// The group it is configured for ([`crate::group::GroupConfig::group_id`]).
        group_id: u64,
    },
    /// A member turns away a joiner configured for another group: this member's group.
    Refused {
        /// The member's group.
        group_id: u64,
    },
    /// A member that does not lead points a joiner to the leader.
    Redirect {
        /// The leader.
        leader: NodeId,
        /// Its fabric address.
        address: String,
    },
    /// The first view of a joiner.
    NewView(NewView),
    /// A member asks the leader to carry its declaration.
    Declare {
        /// The member.
        node: NodeId,
        /// What it declares.
        declared: Vec<u8>,
    },
    /// A subgroup's state for a member entering it.
    State {
        /// The view the state belongs to.
        vid: u32,
        /// The subgroup.
        subgroup: SubgroupId,
        /// Re-sends the giver already delivered, per sender: `(sender, count)`.
        skips: Vec<(NodeId, u64)>,
        /// The application's snapshot.
        state: Vec<u8>,
    },
    /// Part of a dare subgroup's hand-off: entries of the source's log of the instance
    /// of view `vid` (`crate::group::dare`).
    DareEntries {
        /// The view whose instance ends.
        vid: u32,
        /// The subgroup.
        subgroup: SubgroupId,
        /// The first index the source ships (in this message or another).
        first: u64,
        /// The entries, in index order.
        entries: Vec<DareDelivery>,
    },
}

impl Msg {
    /// The message's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Msg::Join {
                node,
                address,
                group_id,
            } => {
                let mut w = Writer::new(MSG_JOIN);
                w.u32(*node);
                w.str(address);
                w.u64(*group_id);
                w.0
            }
            Msg::Refused { group_id } => {
                let mut w = Writer::new(MSG_REFUSED);
                w.u64(*group_id);
                w.0
            }
            Msg::Redirect { leader, address } => {
                let mut w = Writer::new(MSG_REDIRECT);
                w.u32(*leader);
                w.str(address);
                w.0
            }
            Msg::NewView(nv) => {
                let mut w = Writer::new(MSG_NEW_VIEW);
                w.u32(nv.view.vid);
                w.u16(nv.addresses.len() as u16);
                for (m, a) in &nv.addresses {
                    w.u32(*m);
                    w.str(a);
                }
                w.u16(nv.holders.len() as u16);
                for (sg, ids) in &nv.holders {
                    w.u32(*sg);
                    w.u16(ids.len() as u16);
                    for id in ids {
                        w.u32(*id);
                    }
                }
                w.u16(nv.view.declared.len() as u16);
                for (node, d) in &nv.view.declared {
                    w.u32(*node);
                    w.u16(d.len() as u16);
                    w.bytes(d);
                }
                w.u64(nv.dare_first_term);
                w.0
            }
            Msg::Declare { node, declared } => {
                let mut w = Writer::new(MSG_DECLARE);
                w.u32(*node);
                w.bytes(declared);
                w.0
            }
            Msg::State {
                vid,
                subgroup,
                skips,
                state,
            } => {
                let mut w = Writer::new(MSG_STATE);
                w.u32(*vid);
                w.u32(*subgroup);
                w.u16(skips.len() as u16);
                for (sender, n) in skips {
                    w.u32(*sender);
                    w.u64(*n);
                }
                w.bytes(state);
                w.0
            }
            Msg::DareEntries {
                vid,
                subgroup,
                first,
                entries,
            } => {
                let mut w = Writer::new(MSG_DARE_ENTRIES);
                w.u32(*vid);
                w.u32(*subgroup);
                w.u64(*first);
                w.u32(entries.len() as u32);
                for e in entries {
                    w.u64(e.index);
                    w.u64(e.term);
                    w.u32(e.sender);
                    w.u64(e.sender_seq);
                    w.u32(e.payload.len() as u32);
                    w.bytes(&e.payload);
                }
                w.0
            }
        }
    }

    /// Decodes a message a peer sent.
    pub(crate) fn decode(data: &[u8]) -> Result<Msg> {
        let mut r = Reader::new(data);
        Ok(match r.u8()? {
            MSG_JOIN => Msg::Join {
                node: r.u32()?,
                address: r.str()?,
                group_id: r.u64()?,
            },
            MSG_REFUSED => Msg::Refused { group_id: r.u64()? },
            MSG_REDIRECT => Msg::Redirect {
                leader: r.u32()?,
                address: r.str()?,
            },
            MSG_NEW_VIEW => {
                let vid = r.u32()?;
                let n = r.u16()? as usize;
                let mut addresses = Vec::with_capacity(n);
                for _ in 0..n {
                    let id = r.u32()?;
                    addresses.push((id, r.str()?));
                }
                let h = r.u16()? as usize;
                let mut holders = BTreeMap::new();
                for _ in 0..h {
                    let sg = r.u32()?;
                    let k = r.u16()? as usize;
                    let mut ids = Vec::with_capacity(k);
                    for _ in 0..k {
                        ids.push(r.u32()?);
                    }
                    holders.insert(sg, ids);
                }
                let d = r.u16()? as usize;
                let mut declared = BTreeMap::new();
                for _ in 0..d {
                    let node = r.u32()?;
                    let len = r.u16()? as usize;
                    if len > DECLARED_BYTES_MAX {
                        return Err(Error::Protocol(format!(
                            "NEW_VIEW {vid}: node {node} declared {len} bytes, at most {DECLARED_BYTES_MAX}"
                        )));
                    }
                    declared.insert(node, r.take(len)?.to_vec());
                }
                let view = View {
                    vid,
                    members: addresses.iter().map(|(m, _)| *m).collect(),
                    declared,
                };
                let dare_first_term = r.u64()?;
                Msg::NewView(NewView {
                    view,
                    addresses,
                    holders,
                    dare_first_term,
                })
            }
            MSG_DECLARE => Msg::Declare {
                node: r.u32()?,
                declared: r.rest().to_vec(),
            },
            MSG_STATE => {
                let vid = r.u32()?;
                let subgroup = r.u32()?;
                let n = r.u16()? as usize;
                let mut skips = Vec::with_capacity(n.min(r.remaining() / 12));
                for _ in 0..n {
                    skips.push((r.u32()?, r.u64()?));
                }
                Msg::State {
                    vid,
                    subgroup,
                    skips,
                    state: r.rest().to_vec(),
                }
            }
            MSG_DARE_ENTRIES => {
                let vid = r.u32()?;
                let subgroup = r.u32()?;
                let first = r.u64()?;
                let n = r.u32()? as usize;
                // Each entry takes at least its 32-byte header.
                if n > r.remaining() / 32 {
                    return Err(Error::Protocol(format!(
                        "DARE hand-off of {n} entries in {} bytes",
                        r.remaining()
                    )));
                }
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let index = r.u64()?;
                    let term = r.u64()?;
                    let sender = r.u32()?;
                    let sender_seq = r.u64()?;
                    let len = r.u32()? as usize;
                    if len > DARE_PAYLOAD_BYTES_MAX {
                        return Err(Error::Protocol(format!(
                            "DARE hand-off entry {index} of {len} bytes, at most \
                             {DARE_PAYLOAD_BYTES_MAX}"
                        )));
                    }
                    entries.push(DareDelivery {
                        index,
                        term,
                        sender,
                        sender_seq,
                        payload: r.take(len)?.to_vec(),
                    });
                }
                Msg::DareEntries {
                    vid,
                    subgroup,
                    first,
                    entries,
                }
            }
            k => return Err(Error::Protocol(format!("unknown message kind {k}"))),
        })
    }
}

/// Builds a membership message.
struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u8) -> Writer {
        Writer(vec![kind])
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        let b = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
        self.u16(b.len() as u16);
        self.0.extend_from_slice(b);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
}

/// Reads a membership message from a peer: every read is bounds-checked.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, at: 0 }
    }
    fn remaining(&self) -> usize {
        self.data.len() - self.at
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.data.len())
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "message of {} bytes ends before byte {}",
                    self.data.len(),
                    self.at.saturating_add(n)
                ))
            })?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }
    fn str(&mut self) -> Result<String> {
        let n = self.u16()? as usize;
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| Error::Protocol("address is not UTF-8".into()))
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.data[self.at..];
        self.at = self.data.len();
        s
    }
}

/// A membership message to `peer` that the protocol repeats by itself if it is lost.
pub(super) fn send(peer: NodeId, bytes: Vec<u8>) -> super::GroupAction {
    super::GroupAction::Send {
        peer,
        imm: super::MEMBERSHIP_IMM,
        bytes,
        retry: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Msg> {
        let mut view = View::new(7, vec![3, 1, 2]);
        view.declared.insert(1, vec![9, 9]);
        vec![
            Msg::Join {
                node: 4,
                address: "sim:4".into(),
                group_id: 7,
            },
            Msg::Refused { group_id: 3 },
            Msg::Redirect {
                leader: 1,
                address: "127.0.0.1:7000".into(),
            },
            Msg::NewView(NewView {
                view,
                addresses: vec![(3, "a".into()), (1, "b".into()), (2, "c".into())],
                holders: BTreeMap::from([(0, vec![3, 1]), (5, vec![])]),
                dare_first_term: 4,
            }),
            Msg::Declare {
                node: 2,
                declared: vec![1, 2, 3],
            },
            Msg::State {
                vid: 7,
                subgroup: 5,
                skips: vec![(1, 10), (2, 0)],
                state: b"snapshot".to_vec(),
            },
            Msg::DareEntries {
                vid: 7,
                subgroup: 2,
                first: 4,
                entries: vec![
                    DareDelivery {
                        index: 4,
                        term: 2,
                        sender: 3,
                        sender_seq: 1,
                        payload: b"entry".to_vec(),
                    },
                    DareDelivery {
                        index: 5,
                        term: 3,
                        sender: 1,
                        sender_seq: 9,
                        payload: Vec::new(),
                    },
                ],
            },
        ]
    }

    #[test]
    fn the_fuzz_entry_point_decodes_messages_and_refuses_junk() {
        for m in samples() {
            assert!(
                crate::group::decode_membership_message(&m.encode()),
                "{m:?}"
            );
        }
        for junk in [
            &[][..],
            &[0][..],
            &[MSG_NEW_VIEW, 0xff, 0xff][..],
            &[0xff; 40][..],
        ] {
            assert!(!crate::group::decode_membership_message(junk), "{junk:?}");
        }
    }

    #[test]
    fn every_message_decodes_to_itself() {
        for m in samples() {
            assert_eq!(Msg::decode(&m.encode()).expect("decodes"), m);
        }
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_or_a_message_never_a_panic() {
        for m in samples() {
            let bytes = m.encode();
            for cut in 0..bytes.len() {
                // A cut message may still be a valid shorter one (DECLARE and STATE end in
                // their payload); it must never panic.
                let _ = Msg::decode(&bytes[..cut]);
            }
            for i in 0..bytes.len() {
                let mut b = bytes.clone();
                b[i] ^= 0xFF;
                let _ = Msg::decode(&b);
            }
        }
        assert!(Msg::decode(&[]).is_err(), "an empty message is an error");
        assert!(Msg::decode(&[42]).is_err(), "an unknown kind is an error");
        let join = samples()[0].encode();
        assert!(
            Msg::decode(&join[..join.len() - 1]).is_err(),
            "a JOIN cut inside its address is an error"
        );
    }

    #[test]
    fn a_new_view_with_an_oversized_declaration_is_rejected() {
        let mut w = Writer::new(MSG_NEW_VIEW);
        w.u32(2);
        w.u16(1);
        w.u32(1);
        w.str("a");
        w.u16(0);
        w.u16(1);
        w.u32(1);
        w.u16((DECLARED_BYTES_MAX + 1) as u16);
        w.bytes(&vec![0; DECLARED_BYTES_MAX + 1]);
        let e = Msg::decode(&w.0).expect_err("over the bound");
        assert!(e.to_string().contains("declared"), "{e}");
    }
}
