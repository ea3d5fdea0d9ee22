//! Relay status flags as voted by the directory authorities.

use std::fmt;

/// The status flags of one relay, as a bit set.
///
/// A bit set rather than a `Vec<String>` because path selection tests flags for every relay on
/// every draw; unknown flag words are dropped at parse time since no selection rule depends on
/// them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Hash)]
pub struct RelayFlags(pub u16);

impl RelayFlags {
    /// A directory authority.
    pub const AUTHORITY: RelayFlags = RelayFlags(1 << 0);
    /// Authorities found its exit traffic faulty or tampered with; clients never use it as an exit.
    pub const BAD_EXIT: RelayFlags = RelayFlags(1 << 1);
    /// Allows exit to enough common ports and addresses to be counted as an exit.
    pub const EXIT: RelayFlags = RelayFlags(1 << 2);
    /// Suitable for high-bandwidth circuits; this crate requires it of every hop.
    pub const FAST: RelayFlags = RelayFlags(1 << 3);
    /// Stable and fast enough to serve as a client's entry guard.
    pub const GUARD: RelayFlags = RelayFlags(1 << 4);
    /// Stores onion-service descriptors.
    pub const HSDIR: RelayFlags = RelayFlags(1 << 5);
    /// Reachable when the authorities last tested it.
    pub const RUNNING: RelayFlags = RelayFlags(1 << 6);
    /// Long enough uptime for circuits carrying long-lived streams.
    pub const STABLE: RelayFlags = RelayFlags(1 << 7);
    /// Answers directory requests (the v2 directory protocol or later).
    pub const V2DIR: RelayFlags = RelayFlags(1 << 8);
    /// Runs a Tor version not known to be broken, and is not blocked by the authorities.
    pub const VALID: RelayFlags = RelayFlags(1 << 9);
    /// Its descriptor is old enough that it should upload a new one.
    pub const STALE_DESC: RelayFlags = RelayFlags(1 << 10);
    /// Restricted by the authorities to the middle position: never a guard or exit.
    pub const MIDDLE_ONLY: RelayFlags = RelayFlags(1 << 11);
    /// The authorities did not agree on its Ed25519 identity.
    pub const NO_ED_CONSENSUS: RelayFlags = RelayFlags(1 << 12);
    /// One of more relays on one address than the authorities accept.
    pub const SYBIL: RelayFlags = RelayFlags(1 << 13);

    /// Spelling of each flag on the consensus `s` line, in bit order.
    const NAMES: [(&'static str, RelayFlags); 14] = [
        ("Authority", Self::AUTHORITY),
        ("BadExit", Self::BAD_EXIT),
        ("Exit", Self::EXIT),
        ("Fast", Self::FAST),
        ("Guard", Self::GUARD),
        ("HSDir", Self::HSDIR),
        ("Running", Self::RUNNING),
        ("Stable", Self::STABLE),
        ("V2Dir", Self::V2DIR),
        ("Valid", Self::VALID),
        ("StaleDesc", Self::STALE_DESC),
        ("MiddleOnly", Self::MIDDLE_ONLY),
        ("NoEdConsensus", Self::NO_ED_CONSENSUS),
        ("Sybil", Self::SYBIL),
    ];

    /// The empty set.
    pub const fn empty() -> Self {
        RelayFlags(0)
    }

    /// True when every flag of `other` is set in `self`.
    pub const fn contains(self, other: RelayFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Adds every flag of `other`.
    pub fn insert(&mut self, other: RelayFlags) {
        self.0 |= other.0;
    }

    /// Clears every flag of `other`.
    pub fn remove(&mut self, other: RelayFlags) {
        self.0 &= !other.0;
    }

    /// The flags set in either.
    #[must_use]
    pub const fn union(self, other: RelayFlags) -> RelayFlags {
        RelayFlags(self.0 | other.0)
    }

    /// The flag named by one `s`-line word, `None` for words this crate does not model.
    pub fn from_word(word: &str) -> Option<RelayFlags> {
        Self::NAMES
            .iter()
            .find(|(name, _)| *name == word)
            .map(|&(_, f)| f)
    }

    /// Flags from the words of an `s` line (without the leading `s`).
    ///
    /// Unknown words are ignored rather than rejected: authorities add flags over time
    /// (`MiddleOnly` appeared in 2022) and an older reader must still accept newer documents.
    pub fn parse(words: &str) -> RelayFlags {
        let mut flags = RelayFlags::empty();
        for word in words.split_ascii_whitespace() {
            if let Some(f) = Self::from_word(word) {
                flags.insert(f);
            }
        }
        flags
    }

    /// True for relays a client may use at all (path-spec: Running and Valid).
    pub const fn is_usable(self) -> bool {
        self.contains(Self::RUNNING.union(Self::VALID))
    }

    /// Exit for bandwidth weighting: dir-spec (consensus method 11 onwards) counts a BadExit
    /// relay as a non-exit, because clients never use it as one.
    pub const fn is_weighted_exit(self) -> bool {
        self.contains(Self::EXIT) && !self.contains(Self::BAD_EXIT)
    }
}

impl fmt::Display for RelayFlags {
    /// Words in the order authorities publish them (alphabetical), so output can be compared
    /// with a consensus by eye.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(_, flag)| self.contains(*flag))
            .map(|(name, _)| *name)
            .collect();
        names.sort_unstable();
        f.write_str(&names.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_ignores_unknown_words() {
        let f = RelayFlags::parse("Exit Fast FutureFlag Guard Running Valid");
        assert!(f.contains(RelayFlags::EXIT.union(RelayFlags::GUARD)));
        assert!(f.is_usable());
        assert!(!f.contains(RelayFlags::STABLE));
        assert_eq!(f.to_string(), "Exit Fast Guard Running Valid");
    }

    #[test]
    fn bad_exit_is_not_a_weighted_exit() {
        let f = RelayFlags::parse("BadExit Exit Running Valid");
        assert!(!f.is_weighted_exit());
        let mut g = f;
        g.remove(RelayFlags::BAD_EXIT);
        assert!(g.is_weighted_exit());
    }
}
