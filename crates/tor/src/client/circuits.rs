//! Circuits: path and guard choice (through each user's primary guards in turn), building
//! hop by hop with CREATE2 and EXTEND2 under the learned circuit build timeout, preemptive
//! circuits kept ready ahead of need, and closing (dirtiness, failures, DESTROY).

use super::*;

impl Client {
    /// Keeps the configured number of clean circuits open or being built.
    pub(super) fn keep_preemptive(&mut self, io: &mut impl Io<ClientTimer>) {
        let clean = self
            .circuits
            .values()
            .filter(|c| c.hops == 3 && c.first_used.is_none())
            .count() as u32;
        let want = self.world.params.preemptive_circuits;
        for _ in clean..want {
            let _ = self.launch_circuit(io);
        }
    }

    /// Launches a circuit: a user's one-hop directory circuit, or a workload's three-hop one.
    pub(super) fn launch(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        dir_user: Option<u32>,
    ) -> Result<OriginCircId, NoCircuit> {
        match dir_user {
            Some(user) => self.launch_dir_circuit(io, user),
            None => self.launch_circuit(io),
        }
    }

    pub(super) fn too_many_pending(&self) -> bool {
        let pending = self
            .circuits
            .values()
            .filter(|c| matches!(c.state, CircState::Building { .. }))
            .count() as u32;
        pending >= self.world.params.max_client_circuits_pending
    }

    pub(super) fn launch_circuit(
        &mut self,
        io: &mut impl Io<ClientTimer>,
    ) -> Result<OriginCircId, NoCircuit> {
        if self.too_many_pending() {
            return Err(NoCircuit::TooManyPending);
        }
        let world = self.world.clone();
        let user = self.next_user;
        self.next_user = (user + 1) % self.guards.len().max(1) as u32;
        let guards = self.guards.get(user as usize).map_or(&[][..], |g| &g[..]);
        let path = world
            .selector
            .choose_path(&world.consensus, guards, HTTP_PORT, false, io.rng())
            .ok_or(NoCircuit::NoPath)?;
        let ch = self.channel_for(io, path[0], user);
        Ok(self.create_circuit(io, ch, path, 3))
    }

    /// A one-hop circuit to `user`'s directory guard: the first of its primary guards (tor
    /// 0.4 draws directory guards from the same sample), or without entry guards a relay
    /// chosen by guard weight for this circuit.
    pub(super) fn launch_dir_circuit(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        user: u32,
    ) -> Result<OriginCircId, NoCircuit> {
        if self.too_many_pending() {
            return Err(NoCircuit::TooManyPending);
        }
        let world = self.world.clone();
        let guard = match self.guards.get(user as usize).and_then(|g| g.first()) {
            Some(&g) => g,
            None => *world
                .selector
                .choose_guards(&world.consensus, 1, io.rng())
                .first()
                .ok_or(NoCircuit::NoPath)?,
        };
        let ch = self.channel_for(io, guard, user);
        Ok(self.create_circuit(io, ch, [guard, usize::MAX, usize::MAX], 1))
    }

    /// Starts building a circuit of `hops` hops along `path` on channel `ch`.
    pub(super) fn create_circuit(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        ch: usize,
        path: [usize; 3],
        hops: u8,
    ) -> OriginCircId {
        let now = io.now();
        let world = self.world.clone();
        self.next_circuit_id += 1;
        let circuit = Circuit {
            id: self.next_circuit_id,
            chan: ch as u32,
            circ_id: 0,
            path,
            hops,
            state: CircState::Building { hops: 0 },
            started: now,
            build: None,
            first_used: None,
            downloads: Vec::new(),
            isolation: None,
            next_stream: 0,
            receiver: CircuitReceiver::new(&world.params),
            streams_opened: 0,
            sender: None,
            packaged: 0,
            acked: 0,
            turn: 0,
        };
        let idx = self.circuits.insert(circuit);
        let circ_id = self.channels[ch].circs.allocate(idx);
        self.circuits[idx].circ_id = circ_id;
        let mut create = Cell::new(circ_id, CellCommand::Create2);
        create.hop = 1;
        // Idealised Torchestra: the client tells its relays the circuit's traffic class.
        if self.world.params.channel == ChannelDesign::TorchestraIdeal {
            create.arg = u32::from(matches!(
                self.schedule.workload(),
                Workload::Bulk { .. } | Workload::Upload { .. }
            ));
        }
        self.send_cell(io, ch, create);
        io.arm_in(
            self.cbt.timeout(),
            ClientTimer::BuildTimeout { circuit: idx },
        );
        idx
    }

    pub(super) fn hop_built(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        circ: OriginCircId,
        hops: u8,
    ) {
        let now = io.now();
        let c = &mut self.circuits[circ];
        if c.state != (CircState::Building { hops: hops - 1 }) {
            return;
        }
        if hops < c.hops {
            c.state = CircState::Building { hops };
            let target = self.world.relay_hosts[c.path[hops as usize]];
            let mut extend = Cell::relay(0, RelayCommand::Extend2, hops, 0);
            extend.command = CellCommand::RelayEarly;
            extend.arg = target;
            self.send_on_circuit(io, circ, extend);
            return;
        }
        c.state = CircState::Open;
        let took = now - c.started;
        c.build = Some(took);
        // tor learns its build timeout from full-length circuits only.
        if c.hops == 3 {
            self.cbt.add(took);
        }
        for (dl, _) in c.downloads.clone() {
            self.begin(io, circ, dl);
        }
        // Streams waiting without a circuit can use this one now.
        self.attach_pending(io);
    }

    /// Tears down a circuit. Downloads that have not received anything yet move to another
    /// circuit (as Tor retries a stream whose circuit failed); the others fail.
    pub(super) fn close_circuit(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        circ: OriginCircId,
        outcome: CircuitOutcome,
        send_destroy: bool,
    ) {
        let now = io.now();
        let Some(c) = self.circuits.remove(circ) else {
            return;
        };
        self.channels[c.chan as usize].circs.release(c.circ_id);
        if send_destroy {
            let destroy = Cell::new(c.circ_id, CellCommand::Destroy);
            self.send_cell(io, c.chan as usize, destroy);
        }
        let built = c.state == CircState::Open;
        // One-hop directory circuits are not the circuits a measurement reports.
        if c.hops == 3 {
            self.circuit_log.push(CircuitLog {
                id: c.id,
                path: c.path,
                start: c.started,
                build: c.build,
                outcome: if built {
                    CircuitOutcome::Built
                } else {
                    outcome
                },
                streams: c.streams_opened,
                closed: Some(now),
            });
        }
        for (dl, _) in c.downloads {
            let Some(d) = self.downloads.get_mut(dl) else {
                continue;
            };
            if d.received == 0 && !d.request_sent {
                d.circ = None;
                d.state = DlState::Waiting;
                self.attach(io, dl);
            } else {
                self.finish(io, dl, DownloadOutcome::Error("circuit closed"));
            }
        }
        self.keep_preemptive(io);
    }

    /// How long a circuit takes new streams after its first (`MaxCircuitDirtiness`).
    pub(super) fn dirtiness(&self) -> SimDuration {
        (self.options.max_circuit_dirtiness)
            .unwrap_or_else(|| secs(self.world.params.max_circuit_dirtiness_s))
    }
}
