//! The users' directory fetches (consensus, then microdescriptors) over one-hop BEGIN_DIR
//! circuits to their directory guards, when the network has directory traffic (the
//! schedule itself is `crate::directory`'s).

use super::*;

impl Client {
    /// Starts the directory fetches that are due and arms the timer for the next.
    pub(super) fn poll_directory(&mut self, io: &mut impl Io<ClientTimer>) {
        let now = io.now();
        let Some(d) = self.directory.as_mut() else {
            return;
        };
        let mut due = Vec::new();
        while let Some(request) = d.take_due(now) {
            due.push(request);
        }
        let next = d.next_due();
        for request in due {
            let user = request.user;
            self.dir_request(io, request, DirPart::Consensus { user });
        }
        if let Some(at) = next {
            if self.directory_wake.is_none_or(|w| w > at || w < now) {
                self.directory_wake = Some(at);
                io.arm_at(at.max(now), ClientTimer::Directory(at));
            }
        }
    }

    pub(super) fn dir_request(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        r: DirRequest,
        part: DirPart,
    ) {
        // A BEGIN_DIR names no destination (the relay answers from its own cache), so the
        // download's server is a placeholder; `attach` finds the user's directory circuit.
        let server = self.servers[0];
        let dl = self.new_download(io, r.bytes, server, REQUEST_TIMEOUT, u32::MAX, Some(part));
        self.attach(io, dl);
    }

    /// A directory request ended, with `received` bytes of response.
    pub(super) fn directory_done(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        part: DirPart,
        received: u64,
        ok: bool,
    ) {
        let now = io.now();
        let Some(d) = self.directory.as_mut() else {
            return;
        };
        let user = part.user();
        if !ok {
            if !d.fetching(user) {
                return;
            }
            d.failed(user, now);
            // The fetch starts over: its other requests still out are abandoned.
            let others: Vec<DownloadId> = self
                .downloads
                .iter()
                .filter(|(_, x)| x.dir.is_some_and(|p| p.user() == user))
                .map(|(i, _)| i)
                .collect();
            for dl in others {
                self.finish(io, dl, DownloadOutcome::Error("directory fetch failed"));
            }
        } else {
            match part {
                DirPart::Consensus { user } => {
                    for r in d.consensus_done(user, received) {
                        self.dir_request(io, r, DirPart::Microdescs { user });
                    }
                }
                DirPart::Microdescs { user } => d.microdescs_done(user, received),
            }
        }
        self.poll_directory(io);
    }
}
