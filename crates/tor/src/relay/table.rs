//! The relay's channel table: its channels and their connections in slabs, and the indexes
//! that find them: a connection by its socket, a channel by its peer, an accepted channel by
//! the token its opener named it with, a channel by its QUIC connection.
//!
//! Slots are reused, so a relay's table stays as large as the most channels and connections it
//! had at once rather than every one it ever had (PCTCP closes a channel with its last
//! circuit's connection; failures and ConnLimit close others, for the whole run). Ids carry
//! their slot's generation, so an id kept after its channel or connection went finds nothing;
//! a socket-slot index entry is also checked against the socket it names, since socket slots
//! are reused too.
//!
//! What channels and connections do (opening, joining, closing, writing) is the relay's
//! (`channels.rs`); the table keeps them and finds them.

use std::collections::HashMap;

use onionlab_engine::slab::Slab;
use onionlab_engine::HostId;
use onionlab_net::SocketId;

use super::{Channel, ChannelId, Conn, ConnId};

/// A relay's channels and connections.
pub(super) struct ChannelTable {
    /// The channels. A closed channel keeps its slot until [`ChannelTable::recycle`] finds
    /// that nothing names it.
    pub(super) channels: Slab<ChannelId, Channel>,
    /// Closed channels whose slots are not reusable yet: the scheduler's pending list or an
    /// onion skin still being handled may name them.
    closed_channels: Vec<ChannelId>,
    /// The next token a channel we open gets (named in its connections' Join messages). A
    /// counter rather than the slot, so that a reused slot never carries the token of a
    /// channel the peer may still hold.
    next_token: u32,
    /// The connections.
    pub(super) conns: Slab<ConnId, Conn>,
    /// Connections by their socket's slot.
    conn_by_socket: Vec<Option<ConnId>>,
    /// Connections ever added: each one's `created` stamp, its age for IMUX's rules.
    conns_created: u64,
    /// The channel an extend to a peer takes.
    by_peer: HashMap<HostId, ChannelId>,
    /// Channels opened by a peer, by (peer, the peer's token for the channel).
    by_token: HashMap<(HostId, u32), ChannelId>,
    /// Channels by the socket slot of their QUIC connection.
    by_quic: Vec<Option<ChannelId>>,
}

/// Sets `table[socket's slot] = value`, growing the table (with `None`) to hold the slot.
pub(super) fn map_socket<V: Copy>(table: &mut Vec<Option<V>>, socket: SocketId, value: V) {
    let i = socket.slot as usize;
    if table.len() <= i {
        table.resize(i + 1, None);
    }
    table[i] = Some(value);
}

impl ChannelTable {
    /// An empty table.
    pub(super) fn new() -> Self {
        ChannelTable {
            channels: Slab::new(),
            closed_channels: Vec::new(),
            next_token: 0,
            conns: Slab::new(),
            conn_by_socket: Vec::new(),
            conns_created: 0,
            by_peer: HashMap::new(),
            by_token: HashMap::new(),
            by_quic: Vec::new(),
        }
    }

    /// The token for a channel this relay opens.
    pub(super) fn next_token(&mut self) -> u32 {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        token
    }

    /// Puts `chan` in a free slot (or a new one) and returns its id.
    pub(super) fn insert_channel(&mut self, chan: Channel) -> ChannelId {
        self.channels.insert(chan)
    }

    /// Puts `conn` in a free slot (or a new one), stamps its `created` and finds it by its
    /// socket from now on.
    pub(super) fn insert_conn(&mut self, mut conn: Conn) -> ConnId {
        conn.created = self.conns_created;
        self.conns_created += 1;
        let socket = conn.socket;
        let k = self.conns.insert(conn);
        map_socket(&mut self.conn_by_socket, socket, k);
        k
    }

    /// The connection on `socket`, if it is still that connection's.
    pub(super) fn conn_of(&self, socket: SocketId) -> Option<ConnId> {
        self.conn_by_socket
            .get(socket.slot as usize)
            .copied()
            .flatten()
            .filter(|&k| self.conns.get(k).is_some_and(|c| c.socket == socket))
    }

    /// Frees connection `k`'s slot: neither its id nor its socket find it any more. Returns
    /// the connection.
    pub(super) fn free_conn(&mut self, k: ConnId) -> Option<Conn> {
        let conn = self.conns.remove(k)?;
        self.conn_by_socket[conn.socket.slot as usize] = None;
        Some(conn)
    }

    /// The channel an extend to `peer` takes, if there is one.
    pub(super) fn to_peer(&self, peer: HostId) -> Option<ChannelId> {
        self.by_peer.get(&peer).copied()
    }

    /// Makes `ch` the channel extends to `peer` take.
    pub(super) fn set_to_peer(&mut self, peer: HostId, ch: ChannelId) {
        self.by_peer.insert(peer, ch);
    }

    /// Makes `ch` the channel extends to `peer` take unless there is one already.
    pub(super) fn offer_to_peer(&mut self, peer: HostId, ch: ChannelId) {
        self.by_peer.entry(peer).or_insert(ch);
    }

    /// The open channel `peer` named `token`, or else `own` (a provisional channel of one of
    /// its connections), recorded as that channel from now on.
    pub(super) fn join(&mut self, peer: HostId, token: u32, own: ChannelId) -> ChannelId {
        match self.by_token.get(&(peer, token)) {
            Some(&ch) if self.channels.get(ch).is_some_and(|c| !c.closed) => ch,
            _ => {
                self.by_token.insert((peer, token), own);
                self.channels[own].token = Some(token);
                own
            }
        }
    }

    /// Frees the slot of provisional channel `ch` at once: its connection joined another
    /// channel, and it never carried a circuit, so nothing names it.
    pub(super) fn discard_provisional(&mut self, ch: ChannelId) {
        self.channels.remove(ch);
    }

    /// Marks channel `ch` closed: no index finds it any more, and its slot waits for
    /// [`ChannelTable::recycle`]. Returns false if it was closed already.
    pub(super) fn close(&mut self, ch: ChannelId) -> bool {
        let chan = &mut self.channels[ch];
        if chan.closed {
            return false;
        }
        chan.closed = true;
        self.closed_channels.push(ch);
        let (peer, token, opener) = (chan.peer, chan.token, chan.opener);
        if self.by_peer.get(&peer) == Some(&ch) {
            self.by_peer.remove(&peer);
        }
        if let (false, Some(token)) = (opener, token) {
            if self.by_token.get(&(peer, token)) == Some(&ch) {
                self.by_token.remove(&(peer, token));
            }
        }
        true
    }

    /// Frees the slots of closed channels that neither the scheduler's pending list nor
    /// `named` (what else may still hold a channel's id) names.
    pub(super) fn recycle(&mut self, named: impl Fn(ChannelId) -> bool) {
        if self.closed_channels.is_empty() {
            return;
        }
        let channels = &mut self.channels;
        self.closed_channels.retain(|&ch| {
            let still = channels[ch].pending || named(ch);
            if !still {
                channels.remove(ch);
            }
            still
        });
    }

    /// The channel whose QUIC connection is `socket`.
    pub(super) fn chan_of_quic(&self, socket: SocketId) -> Option<ChannelId> {
        self.by_quic
            .get(socket.slot as usize)
            .copied()
            .flatten()
            .filter(|&ch| {
                self.channels
                    .get(ch)
                    .is_some_and(|c| c.quic == Some(socket))
            })
    }

    /// Makes `quic` channel `ch`'s QUIC connection.
    pub(super) fn bind_quic(&mut self, ch: ChannelId, quic: SocketId) {
        map_socket(&mut self.by_quic, quic, ch);
        self.channels[ch].quic = Some(quic);
    }

    /// Forgets QUIC connection `quic`; returns the channel it was bound to, if any.
    pub(super) fn unbind_quic(&mut self, quic: SocketId) -> Option<ChannelId> {
        let ch = self.chan_of_quic(quic)?;
        self.channels[ch].quic = None;
        self.by_quic[quic.slot as usize] = None;
        Some(ch)
    }
}

#[cfg(test)]
mod tests {
    use onionlab_torcore::ewma::EwmaClock;

    use onionlab_engine::slab::Key;

    use super::*;
    use crate::link::LinkHandshake;

    const PEER: HostId = 7;

    fn clock() -> EwmaClock {
        EwmaClock::new(30.0, 10.0, 0)
    }

    fn socket(slot: u32, generation: u32) -> SocketId {
        SocketId { slot, generation }
    }

    fn channel(table: &mut ChannelTable, peer: HostId, opener: bool) -> ChannelId {
        let mut chan = Channel::new(peer, opener, opener, &clock(), 0);
        if opener {
            chan.token = Some(table.next_token());
        }
        table.insert_channel(chan)
    }

    fn conn(table: &mut ChannelTable, ch: ChannelId, s: SocketId) -> ConnId {
        let conn = Conn::new(s, ch, true, LinkHandshake::skipped(), false, &clock(), 0);
        let k = table.insert_conn(conn);
        table.channels[ch].conns.push(k);
        k
    }

    #[test]
    fn a_connection_is_found_by_its_socket_and_never_by_a_later_socket_in_its_slot() {
        let mut t = ChannelTable::new();
        let ch = channel(&mut t, PEER, true);
        let first = conn(&mut t, ch, socket(3, 0));
        assert_eq!(t.conn_of(socket(3, 0)), Some(first));
        assert_eq!(t.conn_of(socket(4, 0)), None, "a slot beyond the index");
        assert_eq!(
            t.conn_of(socket(3, 1)),
            None,
            "the socket slot's next generation"
        );
        assert!(t.free_conn(first).is_some());
        assert!(t.free_conn(first).is_none(), "freed already");
        assert_eq!(t.conn_of(socket(3, 0)), None, "a freed connection");
        // The next connection takes the freed slot, under a new id, and is stamped as the
        // second one made.
        let second = conn(&mut t, ch, socket(3, 1));
        assert_eq!(second.slot(), first.slot());
        assert!(t.conns.get(first).is_none(), "the freed id finds nothing");
        assert_eq!(t.conns[second].created, 1);
        assert_eq!(t.conn_of(socket(3, 1)), Some(second));
        assert_eq!(t.conn_of(socket(3, 0)), None);
    }

    #[test]
    fn a_closed_channel_keeps_its_slot_while_anything_names_it() {
        let mut t = ChannelTable::new();
        let ch = channel(&mut t, PEER, true);
        t.set_to_peer(PEER, ch);
        assert!(t.close(ch));
        assert!(!t.close(ch), "closing twice");
        assert_eq!(t.to_peer(PEER), None, "extends no longer find it");
        // Named by an onion skin, then by the scheduler's pending list: kept.
        t.recycle(|c| c == ch);
        t.channels[ch].pending = true;
        t.recycle(|_| false);
        assert_ne!(channel(&mut t, PEER, true), ch);
        // Named by nothing: the next channel takes its slot, under a new id.
        t.channels[ch].pending = false;
        t.recycle(|_| false);
        let next = channel(&mut t, PEER, true);
        assert_eq!(next.slot(), ch.slot());
        assert!(
            t.channels.get(ch).is_none(),
            "the recycled id finds nothing"
        );
    }

    #[test]
    fn connections_join_the_open_channel_their_peer_named() {
        let mut t = ChannelTable::new();
        // The peer's channel token 5: its first connection's provisional channel becomes it.
        let a = channel(&mut t, PEER, false);
        assert_eq!(t.join(PEER, 5, a), a);
        assert_eq!(t.channels[a].token, Some(5));
        // A second connection naming token 5 joins it; its provisional channel's slot is free
        // at once.
        let b = channel(&mut t, PEER, false);
        assert_eq!(t.join(PEER, 5, b), a);
        t.discard_provisional(b);
        assert_eq!(channel(&mut t, PEER, false).slot(), b.slot());
        assert!(t.channels.get(b).is_none());
        // Once the channel is closed, the token names the next connection's channel.
        assert!(t.close(a));
        let c = channel(&mut t, PEER, false);
        assert_eq!(t.join(PEER, 5, c), c);
        // A channel of another peer with the same token is another channel.
        let d = channel(&mut t, PEER + 1, false);
        assert_eq!(t.join(PEER + 1, 5, d), d);
    }

    #[test]
    fn the_peer_index_keeps_the_first_channel_offered_and_forgets_only_its_own() {
        let mut t = ChannelTable::new();
        let a = channel(&mut t, PEER, false);
        let b = channel(&mut t, PEER, false);
        t.offer_to_peer(PEER, a);
        t.offer_to_peer(PEER, b);
        assert_eq!(t.to_peer(PEER), Some(a));
        assert!(t.close(b));
        assert_eq!(
            t.to_peer(PEER),
            Some(a),
            "closing another channel to the peer"
        );
        assert!(t.close(a));
        assert_eq!(t.to_peer(PEER), None);
    }

    #[test]
    fn tokens_count_up_and_wrap() {
        let mut t = ChannelTable::new();
        assert_eq!((t.next_token(), t.next_token()), (0, 1));
        t.next_token = u32::MAX;
        assert_eq!((t.next_token(), t.next_token()), (u32::MAX, 0));
    }

    #[test]
    fn a_quic_connection_finds_its_channel_until_unbound() {
        let mut t = ChannelTable::new();
        let ch = channel(&mut t, PEER, true);
        t.bind_quic(ch, socket(9, 2));
        assert_eq!(t.chan_of_quic(socket(9, 2)), Some(ch));
        assert_eq!(t.chan_of_quic(socket(9, 3)), None);
        assert_eq!(t.unbind_quic(socket(9, 2)), Some(ch));
        assert_eq!(t.channels[ch].quic, None);
        assert_eq!(t.chan_of_quic(socket(9, 2)), None);
        assert_eq!(t.unbind_quic(socket(9, 2)), None);
    }
}
