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
    /// Tokens of one segment from ids: each id's string and whether it is special.
    pub fn from_ids(ids: &[u32], token_of: impl Fn(u32) -> String, is_special: impl Fn(u32) -> bool) -> Self {
        Self {
            tokens: ids.iter().map(|&id| token_of(id)).collect(),
            ids: ids.to_vec(),
            segments: vec![0; ids.len()],
            type_ids: vec![0; ids.len()],
            special: ids.iter().map(|&id| is_special(id)).collect(),
        }
    }

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

/// Where two inputs' tokens differ, for B − A: the positions whose tokens differ (empty: the same
/// tokens), or — when their counts differ and B − A cannot be drawn — why, in words.
pub fn token_difference(a: &Tokens, b: &Tokens) -> Result<Vec<usize>, String> {
    if a.len() != b.len() {
        return Err(format!("A has {} tokens, B has {}", a.len(), b.len()));
    }
    Ok(a.tokens.iter().zip(&b.tokens).enumerate().filter(|(_, (x, y))| x != y).map(|(i, _)| i).collect())
}

/// The label of position `i` in B − A: A's label, or “a ≠ b” where B's token differs.
pub fn difference_label(a_label: &str, b_label: &str) -> String {
    if a_label == b_label { a_label.to_string() } else { format!("{a_label} ≠ {b_label}") }
}

/// A sentence naming the positions whose tokens differ (None when none do).
pub fn differing_note(
    differ: &[usize],
    a_label: impl Fn(usize) -> String,
    b_label: impl Fn(usize) -> String,
) -> Option<String> {
    if differ.is_empty() {
        return None;
    }
    let listed: Vec<String> =
        differ.iter().take(6).map(|&i| format!("{i} (“{}” / “{}”)", a_label(i), b_label(i))).collect();
    let more = if differ.len() > 6 { format!(" and {} more", differ.len() - 6) } else { String::new() };
    let s = if differ.len() == 1 { "" } else { "s" };
    Some(format!(
        "The tokens differ at position{s} {}{more}: marked ≠, their rows and columns compare different tokens.",
        listed.join(", ")
    ))
}

/// Makes a token readable in a diagram: `Ġ`/`▁` word starts dropped (a token of spaces alone shows
/// `␣`), invisible characters escaped, and a byte-level BPE token that spells whole UTF-8
/// characters in GPT-2's byte alphabet shown as those characters (`ÃĹ` → `×`, `ĠæĿ±` → `東`).
pub fn pretty_label(token: &str) -> String {
    let decoded = byte_level_text(token);
    let token = decoded.as_deref().unwrap_or(token);
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

/// The byte a character of GPT-2's byte-level alphabet stands for: printable bytes stand for
/// themselves (`!`–`~`, `¡`–`¬`, `®`–`ÿ`), the 68 others are U+0100 onwards in byte order.
fn byte_of(c: char) -> Option<u8> {
    let u = c as u32;
    if (0x21..=0x7E).contains(&u) || (0xA1..=0xAC).contains(&u) || (0xAE..=0xFF).contains(&u) {
        return u8::try_from(u).ok();
    }
    let n = u.checked_sub(0x100)?;
    let byte = match n {
        0..=32 => n,
        33..=66 => 0x7F + n - 33,
        67 => 0xAD,
        _ => return None,
    };
    u8::try_from(byte).ok()
}

/// A byte-level token that spells non-ASCII UTF-8 text in the byte alphabet, written back in the
/// markers `pretty_label` reads (`Ġ` for a leading space, `Ċ` for a newline); None for any other
/// token — ASCII, `WordPiece` and `SentencePiece` letters (`é`, `ñ`: a lone lead byte is not valid
/// UTF-8; `▁` is not in the alphabet), a character cut between two tokens. (Latin-1 text that
/// happens to be valid UTF-8 as bytes, `Ã©`, is mojibake, not a word of a vocabulary.)
fn byte_level_text(token: &str) -> Option<String> {
    if !token.chars().any(|c| byte_of(c).is_some_and(|b| b >= 0x80)) {
        return None;
    }
    let bytes = token.chars().map(byte_of).collect::<Option<Vec<u8>>>()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.chars().enumerate() {
        match c {
            ' ' if i == 0 => out.push('Ġ'),
            '\n' => out.push('Ċ'),
            c => out.push(c),
        }
    }
    Some(out)
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
        assert_eq!(token_difference(&t(&["a", "b"]), &t(&["a", "b"])), Ok(vec![]));
        assert_eq!(token_difference(&t(&["a"]), &t(&["a", "b"])).unwrap_err(), "A has 1 tokens, B has 2");
        assert_eq!(token_difference(&t(&["the", "cat", "sat"]), &t(&["the", "dog", "sat"])), Ok(vec![1]));
        assert_eq!(difference_label("cat", "dog"), "cat ≠ dog");
        assert_eq!(difference_label("the", "the"), "the");
        let note = differing_note(&[1], |_| "cat".into(), |_| "dog".into()).unwrap();
        assert!(note.starts_with("The tokens differ at position 1 (“cat” / “dog”)"), "{note}");
        assert_eq!(differing_note(&[], |_| String::new(), |_| String::new()), None);
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

    #[test]
    fn byte_level_tokens_show_the_characters_they_spell() {
        assert_eq!(pretty_label("ÃĹ"), "×");
        assert_eq!(pretty_label("âĢĶ"), "—");
        assert_eq!(pretty_label("ĠæĿ±"), "東");
        assert_eq!(pretty_label("ĠcafÃ©"), "café");
        // A character cut between two tokens stays as the tokenizer wrote it.
        assert_eq!(pretty_label("âĢ"), "âĢ");
        // Not byte-level: WordPiece and SentencePiece tokens with non-ASCII letters.
        assert_eq!(pretty_label("é"), "é");
        assert_eq!(pretty_label("##ł"), "##ł");
        assert_eq!(pretty_label("▁łódź"), "łódź");
        // Every byte maps back: the alphabet's 256 characters stand for 256 distinct bytes.
        let alphabet: Vec<char> = (0u32..0x200).filter_map(char::from_u32).filter(|&c| byte_of(c).is_some()).collect();
        assert_eq!(alphabet.len(), 256);
        let mut bytes: Vec<u8> = alphabet.iter().filter_map(|&c| byte_of(c)).collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), 256);
        assert_eq!(byte_of('Ġ'), Some(b' '));
        assert_eq!(byte_of('Ċ'), Some(b'\n'));
    }
}
