//! A result computed elsewhere (the worker, a background thread), held by what it is of: wanted →
//! in flight → shown. A feature keeps one [`Slot`] per kind of result instead of a pair of fields
//! (the result and what is pending); an answer whose key is no longer the one asked for is dropped.

/// The newest result of one kind, keyed by what it is of, and the key in flight.
#[derive(Debug, Clone)]
pub struct Slot<K, V> {
    /// What is shown: its key and the value (often a `Result`).
    shown: Option<(K, V)>,
    /// The key asked for and not answered yet.
    in_flight: Option<K>,
}

impl<K, V> Default for Slot<K, V> {
    fn default() -> Self {
        Self { shown: None, in_flight: None }
    }
}

impl<K: PartialEq + Clone, V> Slot<K, V> {
    /// Whether `key` must be asked for: it is neither shown nor in flight. When it must, it is
    /// counted as in flight from now on (the caller sends the request).
    pub fn want(&mut self, key: &K) -> bool {
        let asked = self.shown.as_ref().is_some_and(|(k, _)| k == key) || self.in_flight.as_ref() == Some(key);
        if !asked {
            self.in_flight = Some(key.clone());
        }
        !asked
    }

    /// Forgets what is shown and in flight: the next [`Self::want`] asks again (an answer still on
    /// its way is dropped).
    pub fn forget(&mut self) {
        self.shown = None;
        self.in_flight = None;
    }

    /// Takes an answer: shown if it is of the key in flight (then nothing is in flight), dropped
    /// otherwise. Returns whether it was taken.
    pub fn finish(&mut self, key: K, value: V) -> bool {
        if self.in_flight.as_ref() != Some(&key) {
            return false;
        }
        self.in_flight = None;
        self.shown = Some((key, value));
        true
    }

    /// Shows `value` for `key` whatever is in flight (a result computed for what is on screen
    /// now, e.g. a background computation started by this view).
    pub fn put(&mut self, key: K, value: V) {
        if self.in_flight.as_ref() == Some(&key) {
            self.in_flight = None;
        }
        self.shown = Some((key, value));
    }

    /// What is shown, with its key.
    pub fn shown(&self) -> Option<&(K, V)> {
        self.shown.as_ref()
    }

    /// The value shown if it is of `key`.
    pub fn shown_for(&self, key: &K) -> Option<&V> {
        self.shown.as_ref().filter(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether an answer is awaited.
    pub fn is_pending(&self) -> bool {
        self.in_flight.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::Slot;

    #[test]
    fn an_answer_is_shown_only_for_the_key_in_flight() {
        let mut slot: Slot<u64, &str> = Slot::default();
        assert!(slot.want(&1));
        assert!(!slot.want(&1), "asked already");
        assert!(slot.is_pending());
        // A newer key replaces the one in flight: the older answer is dropped.
        assert!(slot.want(&2));
        assert!(!slot.finish(1, "old"));
        assert!(slot.shown().is_none());
        assert!(slot.finish(2, "new"));
        assert!(!slot.is_pending());
        assert_eq!(slot.shown_for(&2), Some(&"new"));
        assert_eq!(slot.shown_for(&1), None);
        assert!(!slot.want(&2), "shown already");
    }
}
