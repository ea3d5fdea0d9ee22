//! What every simulated Tor host may consult: the consensus, path selection, host names and
//! the parameters. Built once before the run and shared read-only, like the directory
//! documents every real Tor instance has downloaded.

use onionlab_engine::HostId;
use onionlab_netdir::{Consensus, PathSelector};
use onionlab_torcore::TorParams;

/// The port relays accept channels on.
pub const OR_PORT: u16 = 9001;
/// The UDP port relays accept QUIC connections on (the `quic` channel design). A number of
/// its own, so that an accepted connection's port says whether it is QUIC or TCP.
pub const QUIC_PORT: u16 = 9002;
/// The port file servers listen on and exits connect to.
pub const HTTP_PORT: u16 = 80;

/// What every host of a run may consult, shared read-only (see the module documentation).
pub struct TorWorld {
    /// The Tor parameters of the run, the same for every relay and client.
    pub params: TorParams,
    /// The consensus every client builds its paths from.
    pub consensus: Consensus,
    /// Weighted choice of guards, middles and exits over `consensus`, made once for all
    /// clients.
    pub selector: PathSelector,
    /// Host of each consensus relay (index as in `consensus.relays`).
    pub relay_hosts: Vec<HostId>,
    /// Every host's name, for results.
    pub host_names: Vec<String>,
    /// File servers of each named group.
    pub server_groups: Vec<(String, Vec<HostId>)>,
    /// For each consensus relay, the relays it opens a channel to at its start
    /// (`tor.warm_channels`, see [`crate::warm`]); empty lists for a cold start.
    pub warm_channels: Vec<Vec<u32>>,
    /// The bytes managed processes wrote that their peers have not read yet.
    pub payloads: crate::process::Payloads,
}

impl TorWorld {
    /// A world over `consensus`, with its path selector made from it.
    pub fn new(
        params: TorParams,
        consensus: Consensus,
        relay_hosts: Vec<HostId>,
        host_names: Vec<String>,
        server_groups: Vec<(String, Vec<HostId>)>,
    ) -> Self {
        let selector = PathSelector::new(&consensus);
        Self {
            params,
            consensus,
            selector,
            relay_hosts,
            host_names,
            server_groups,
            warm_channels: Vec::new(),
            payloads: Default::default(),
        }
    }

    /// The relays consensus relay `relay` opens a channel to at its start.
    pub fn warm_channels(&self, relay: usize) -> &[u32] {
        self.warm_channels.get(relay).map_or(&[], Vec::as_slice)
    }

    /// Host `host`'s name, for results.
    pub fn name(&self, host: HostId) -> &str {
        &self.host_names[host as usize]
    }

    /// The name of the host that runs consensus relay `relay`.
    pub fn relay_name(&self, relay: usize) -> &str {
        self.name(self.relay_hosts[relay])
    }

    /// Bytes a cell takes on a TLS connection: the cell and its share of TLS record overhead.
    pub fn cell_wire_bytes(&self) -> u64 {
        (onionlab_torcore::CELL_BYTES + self.params.tls_overhead_per_cell) as u64
    }

    /// The file servers of server group `group` ([`crate::build::ALL_SERVERS`]: the shared
    /// ones); `None` if no group has that name.
    pub fn servers(&self, group: &str) -> Option<&[HostId]> {
        self.server_groups
            .iter()
            .find(|(g, _)| g == group)
            .map(|(_, hosts)| hosts.as_slice())
    }
}

/// What the state machines' unit tests build their consensus from.
#[cfg(test)]
pub(crate) mod testing {
    use std::net::Ipv4Addr;

    use onionlab_netdir::{ExitPolicy, Relay as Descriptor, RelayFlags};

    use super::OR_PORT;

    /// Relay `name`, the `n`th of a test's consensus (at 10.n.0.1, so that no two share a
    /// /16), Fast, Running and Valid besides `flags`, with `exit_policy`.
    pub(crate) fn descriptor(
        name: &str,
        n: u8,
        flags: RelayFlags,
        exit_policy: ExitPolicy,
    ) -> Descriptor {
        Descriptor {
            nickname: name.into(),
            fingerprint: format!("{n:040X}"),
            address: Ipv4Addr::new(10, n, 0, 1),
            or_port: OR_PORT,
            flags: flags
                .union(RelayFlags::FAST)
                .union(RelayFlags::RUNNING)
                .union(RelayFlags::VALID),
            bandwidth: 1000,
            unmeasured: false,
            exit_policy,
            family: None,
        }
    }
}
