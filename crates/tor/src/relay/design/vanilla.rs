//! Vanilla tor: one TCP connection per channel, which every circuit shares. Every hook of
//! [`Design`] defaults to this, so there is nothing to override: this file is where a new
//! design starts from.

use super::Design;

/// tor as deployed.
pub(in crate::relay) struct Vanilla;

impl Design for Vanilla {}
