//! Which worker runs which host.
//!
//! A host's owner keeps its queue and takes in the messages addressed to it; within a round
//! other workers may still run it (work stealing, in `sim`). How owners are chosen is kept here
//! so that a smarter placement (load-balanced) can replace the static one without touching the
//! round loop.

use crate::HostId;

/// A static assignment of hosts to workers.
#[derive(Clone, Debug)]
pub struct Partition {
    worker_of: Vec<u32>,
    hosts_of: Vec<Vec<HostId>>,
}

impl Partition {
    /// Deals hosts out to workers like cards, so neighbouring ids (often hosts of one kind,
    /// e.g. all relays) are spread evenly over workers. Never more workers than hosts (and at
    /// least one): a worker without hosts would only wait at the barrier.
    pub fn round_robin(hosts: usize, workers: usize) -> Self {
        let workers = workers.min(hosts).max(1);
        let worker_of: Vec<u32> = (0..hosts).map(|h| (h % workers) as u32).collect();
        Self::from_assignment(worker_of, workers)
    }

    /// Builds a partition from an explicit host-to-worker map.
    ///
    /// # Panics
    /// If an entry names a worker `>= workers`.
    pub fn from_assignment(worker_of: Vec<u32>, workers: usize) -> Self {
        let mut hosts_of = vec![Vec::new(); workers.max(1)];
        for (host, &w) in worker_of.iter().enumerate() {
            assert!(
                (w as usize) < hosts_of.len(),
                "host {host} assigned to missing worker {w}"
            );
            hosts_of[w as usize].push(host as HostId);
        }
        Self {
            worker_of,
            hosts_of,
        }
    }

    /// The same assignment without the workers that own no host (workers renumbered in
    /// order; at least one worker remains).
    pub fn without_idle_workers(self) -> Self {
        if self.hosts_of.iter().all(|h| !h.is_empty()) {
            return self;
        }
        let mut renumber = vec![u32::MAX; self.hosts_of.len()];
        let mut kept = 0u32;
        for (w, hosts) in self.hosts_of.iter().enumerate() {
            if !hosts.is_empty() {
                renumber[w] = kept;
                kept += 1;
            }
        }
        let worker_of = self
            .worker_of
            .iter()
            .map(|&w| renumber[w as usize])
            .collect();
        Self::from_assignment(worker_of, kept.max(1) as usize)
    }

    /// The number of workers, numbered `0..workers()`.
    pub fn workers(&self) -> usize {
        self.hosts_of.len()
    }

    /// The number of hosts assigned.
    pub fn hosts(&self) -> usize {
        self.worker_of.len()
    }

    /// The worker that owns `host`.
    pub fn worker_of(&self, host: HostId) -> usize {
        self.worker_of[host as usize] as usize
    }

    /// The hosts `worker` owns, in ascending id.
    pub fn hosts_of(&self, worker: usize) -> &[HostId] {
        &self.hosts_of[worker]
    }
}
