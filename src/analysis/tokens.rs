//! Tokens of one input, as the tokenizer wrote them.

use std::fmt::Write as _;

/// The tokens of an input (one sentence or a pair), aligned with the attention matrices.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tokens {
    /// Token strings as the tokenizer writes them (`[CLS]`, `##ing`, `Ġthe`).
    pub tokens: Vec<String>,
    /// Vocabulary ids.
    pub ids: Vec<u32>,
    /// Segment of each token: 0 for sentence A, 1 for sentence B (a special token belongs to the
    /// sentence before it).
    pub segments: Vec<u8>,
    /// Token type ids as the tokenizer's post-processor assigns them (fed to models that read them).
    pub type_ids: Vec<u32>,
    /// Whether each token is a special token added by the tokenizer ([CLS], [SEP], …).
    pub special: Vec<bool>,
}

impl Tokens {
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are no tokens at all.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Whether the input has a second sentence (any token in segment 1).
    pub fn is_pair(&self) -> bool {
        self.segments.contains(&1)
    }

    /// A readable label for token `pos`: word-piece markers (`Ġ`, `▁`) shown as spaces are dropped,
    /// control and invisible characters are made visible, so every label draws as something.
    pub fn label(&self, pos: usize) -> String {
        pretty_label(&self.tokens[pos])
    }
}

/// Why two inputs' tokens are not the same, in words: their counts when they differ, else the first
/// position where they part ("token 3 is “cat” in A and “dog” in B"); None when they are the same.
pub fn token_difference(a: &Tokens, b: &Tokens) -> Option<String> {
    if a.tokens == b.tokens {
        return None;
    }
    if a.len() != b.len() {
        return Some(format!("A has {} tokens, B has {}", a.len(), b.len()));
    }
    let i = a.tokens.iter().zip(&b.tokens).position(|(x, y)| x != y)?;
    Some(format!("the tokens differ: token {i} is “{}” in A and “{}” in B", a.label(i), b.label(i)))
}

/// Makes a token readable in a diagram: `Ġ`/`▁` word starts dropped (a token of spaces alone shows
/// `␣`), invisible characters escaped.
pub fn pretty_label(token: &str) -> String {
    // A token that is only spaces (byte-level `Ġ`, SentencePiece `▁`) shows them, one `␣` each.
    if !token.is_empty() && token.chars().all(|c| c == 'Ġ' || c == '▁') {
        return "␣".repeat(token.chars().count());
    }
    let trimmed = token.strip_prefix('Ġ').or_else(|| token.strip_prefix('▁')).unwrap_or(token);
    let mut out = String::with_capacity(trimmed.len());
    for c in trimmed.chars() {
        match c {
            'Ċ' => out.push_str("\\n"),
            c if c.is_control() || is_invisible(c) => {
                let _ = write!(out, "U+{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    if out.is_empty() { token.to_string() } else { out }
}

/// Zero-width and bidirectional-control characters that would otherwise draw as nothing.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_differences_are_said_in_words() {
        let t =
            |words: &[&str]| Tokens { tokens: words.iter().map(ToString::to_string).collect(), ..Tokens::default() };
        assert_eq!(token_difference(&t(&["a", "b"]), &t(&["a", "b"])), None);
        assert_eq!(token_difference(&t(&["a"]), &t(&["a", "b"])).unwrap(), "A has 1 tokens, B has 2");
        assert_eq!(
            token_difference(&t(&["the", "cat"]), &t(&["the", "dog"])).unwrap(),
            "the tokens differ: token 1 is “cat” in A and “dog” in B"
        );
    }

    #[test]
    fn labels_drop_bpe_markers_and_show_invisible_characters() {
        assert_eq!(pretty_label("Ġthe"), "the");
        assert_eq!(pretty_label("▁word"), "word");
        assert_eq!(pretty_label("Ġ"), "␣");
        assert_eq!(pretty_label("ĠĠ"), "␣␣");
        assert_eq!(pretty_label("▁"), "␣");
        assert_eq!(pretty_label("##ing"), "##ing");
        assert_eq!(pretty_label("a\u{200B}"), "aU+200B");
    }
}
