//! `tokenizer.json` through the `tokenizers` crate, with baked-in padding removed and truncation to
//! the model's positions (keeping the final special token, as `truncation=True` does).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use tokenizers::{Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::ModelError;
use super::files::{MAX_TOKENIZER_BYTES, read_bounded};
use crate::analysis::Tokens;

/// A tokenizer for one model: no padding, inputs cut to `max_len` tokens.
#[derive(Clone)]
pub struct TextTokenizer {
    plain: Tokenizer,
    truncating: Tokenizer,
    max_len: usize,
    add_special: bool,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer").field("max_len", &self.max_len).finish_non_exhaustive()
    }
}

/// One tokenized input and, if it was cut, a notice saying so.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The tokens.
    pub tokens: Tokens,
    /// "… truncated …" when the input was longer than the model allows.
    pub truncation: Option<String>,
}

impl TextTokenizer {
    /// Reads `tokenizer.json` (at most [`MAX_TOKENIZER_BYTES`]), turning off any
    /// padding or truncation stored in it.
    pub fn from_file(path: &Path, max_len: usize) -> Result<Self, ModelError> {
        let bytes = read_bounded(path, MAX_TOKENIZER_BYTES)?;
        let failed = |e: String| ModelError::Tokenizer(format!("{}: {e}", path.display()));
        let text = String::from_utf8(bytes).map_err(|e| failed(format!("not UTF-8 text: {e}")))?;
        Self::from_tokenizer(parse(&text).map_err(failed)?, max_len)
    }

    /// Builds from `tokenizer.json` text (a GGUF file's vocabulary, converted).
    pub fn from_json(json: &str, max_len: usize) -> Result<Self, ModelError> {
        let plain = parse(json).map_err(|e| ModelError::Tokenizer(format!("tokenizer from GGUF: {e}")))?;
        Self::from_tokenizer(plain, max_len)
    }

    fn from_tokenizer(mut plain: Tokenizer, max_len: usize) -> Result<Self, ModelError> {
        // `get_vocab_size` walks the vocabulary too: a hostile file must fail here, not in a view.
        guarded(|| Ok(plain.get_vocab_size(true)))?;
        plain.with_padding(None);
        plain.with_truncation(None).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let mut truncating = plain.clone();
        truncating
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(Self { plain, truncating, max_len, add_special: true })
    }

    /// The same tokenizer without special tokens ([CLS], [SEP]) around the input.
    #[must_use]
    pub fn without_special_tokens(mut self) -> Self {
        self.add_special = false;
        self
    }

    /// Number of token ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.plain.get_vocab_size(true)
    }

    /// The vocabulary's string for a token id (`convert_ids_to_tokens`), or `<id>` for an id it
    /// does not have.
    pub fn token_of(&self, id: u32) -> String {
        self.plain.id_to_token(id).unwrap_or_else(|| format!("<{id}>"))
    }

    /// The id of one token given as text: the vocabulary's own string (`ĠParis`, `▁Paris`,
    /// `[SEP]`), or text that tokenizes to exactly one token (` Paris`); an error naming the
    /// pieces otherwise.
    pub fn single_id(&self, text: &str) -> Result<u32, ModelError> {
        if let Some(id) = self.plain.token_to_id(text) {
            return Ok(id);
        }
        let e = guarded(|| self.plain.encode(text, false).map_err(|e| ModelError::Tokenizer(e.to_string())))?;
        match e.get_ids() {
            [id] => Ok(*id),
            [] => Err(ModelError::Tokenizer(format!("{text:?} is no token"))),
            ids => Err(ModelError::Tokenizer(format!(
                "{text:?} is {} tokens ({}), not one: give one of them (or its id)",
                ids.len(),
                ids.iter().map(|&i| format!("{:?} = {i}", self.token_of(i))).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// Whether a token id is one of the tokenizer's special tokens.
    pub fn is_special(&self, id: u32) -> bool {
        self.plain
            .get_added_vocabulary()
            .simple_id_to_token(id)
            .is_some_and(|t| self.plain.get_added_tokens_decoder().get(&id).is_some_and(|a| a.special) && !t.is_empty())
    }

    /// Text of token ids, special tokens skipped (what a continuation reads as).
    pub fn decode(&self, ids: &[u32]) -> String {
        guarded(|| self.plain.decode(ids, true).map_err(|e| ModelError::Tokenizer(e.to_string()))).unwrap_or_default()
    }

    /// The longest input in tokens, special tokens included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Tokenizes a sentence (or a pair), with special tokens, truncated to `max_len` with a notice.
    pub fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoded, ModelError> {
        self.encode_within(text, pair, None)
    }

    /// [`Self::encode`], cut to `limit.0` tokens when that is fewer than the model's maximum, the
    /// notice giving `limit.1` as the reason (what the memory available lets a run record).
    pub fn encode_within(
        &self,
        text: &str,
        pair: Option<&str>,
        limit: Option<(usize, &str)>,
    ) -> Result<Encoded, ModelError> {
        let enc = |t: &Tokenizer| {
            guarded(|| {
                match pair {
                    Some(b) => t.encode((text, b), self.add_special),
                    None => t.encode(text, self.add_special),
                }
                .map_err(|e| ModelError::Tokenizer(e.to_string()))
            })
        };
        let full = enc(&self.plain)?;
        if let Some((limit, why)) = limit.filter(|&(limit, _)| limit < self.max_len && full.len() > limit) {
            let cut = enc(&self.cut_to(limit)?)?;
            let notice = format!("input truncated to {} tokens ({why}); it had {} tokens", cut.len(), full.len());
            return Ok(Encoded { tokens: guarded(|| Ok(tokens_of(&self.plain, &cut)))?, truncation: Some(notice) });
        }
        let (encoding, truncation) = if full.len() > self.max_len {
            let cut = enc(&self.truncating)?;
            let notice =
                format!("input truncated to {} tokens (the model's maximum); it had {} tokens", cut.len(), full.len());
            (cut, Some(notice))
        } else {
            (full, None)
        };
        Ok(Encoded { tokens: guarded(|| Ok(tokens_of(&self.plain, &encoding)))?, truncation })
    }

    /// The tokenizer cutting inputs to `n` tokens (special tokens included).
    fn cut_to(&self, n: usize) -> Result<Tokenizer, ModelError> {
        let mut t = self.plain.clone();
        t.with_truncation(Some(TruncationParams { max_length: n, ..TruncationParams::default() }))
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        Ok(t)
    }

    /// Tokenizes `text` and keeps exactly `n` tokens (special tokens included), repeating the text
    /// until it is long enough: the input for speed measurements.
    pub fn encode_exactly(&self, text: &str, n: usize) -> Result<Tokens, ModelError> {
        let t = self.cut_to(n)?;
        let mut long = text.to_string();
        let mut before = 0;
        loop {
            let e = guarded(|| t.encode(long.as_str(), true).map_err(|e| ModelError::Tokenizer(e.to_string())))?;
            // Doubled each time, and stopped when it stops growing (a template without the text):
            // adding one copy at a time to such a tokenizer ran for hours.
            if e.len() >= n || e.len() <= before || long.len() > 64 * 1024 * 1024 {
                return guarded(|| Ok(tokens_of(&self.plain, &e)));
            }
            before = e.len();
            long = format!("{long} {long}");
        }
    }
}

/// `tokenizer.json` text parsed, a panic inside the `tokenizers` crate (a hostile file can reach
/// `unwrap`s and index arithmetic there) turned into an error.
fn parse(json: &str) -> Result<Tokenizer, String> {
    // Refused before the crate sees them, as they overflow its stack (which no catch_unwind
    // catches): deep nesting (each level costs its deserializer many frames) and very long strings
    // (a vocabulary piece of 280,000 characters, found by fuzzing, recursed through its trie).
    let (depth, longest) = json_shape(json);
    if depth > MAX_NESTING {
        return Err(format!("nested {depth} levels deep (a tokenizer.json nests at most {MAX_NESTING})"));
    }
    if longest > MAX_STRING_BYTES {
        return Err(format!(
            "it holds a string of {longest} bytes (tokens, patterns and names are at most {MAX_STRING_BYTES})"
        ));
    }
    match catch_unwind(|| json.parse::<Tokenizer>()) {
        Ok(parsed) => parsed.map_err(|e| e.to_string()),
        Err(_) => Err("the tokenizers crate cannot read this file (it failed inside)".into()),
    }
}

/// Deepest nesting accepted in `tokenizer.json` (real ones nest about 6 levels).
const MAX_NESTING: usize = 32;
/// Longest string accepted in `tokenizer.json` (real tokens are at most a few hundred bytes).
const MAX_STRING_BYTES: usize = 4096;

/// The deepest nesting of arrays and objects in JSON text (brackets inside strings skipped), and
/// its longest string in bytes (escapes counted as written).
fn json_shape(json: &str) -> (usize, usize) {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    let (mut length, mut longest) = (0usize, 0);
    for b in json.bytes() {
        // Counts a string's bytes and its closing quote.
        length += usize::from(in_string);
        match (in_string, escaped, b) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (true, false, b'"') => {
                in_string = false;
                longest = longest.max(length - 1);
            }
            (false, _, b'"') => {
                in_string = true;
                length = 0;
            }
            (false, _, b'[' | b'{') => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            (false, _, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    (deepest, longest)
}

/// Runs a call into the `tokenizers` crate, a panic in it (a tokenizer that parsed but whose parts
/// do not fit together) turned into an error.
fn guarded<T>(call: impl FnOnce() -> Result<T, ModelError>) -> Result<T, ModelError> {
    catch_unwind(AssertUnwindSafe(call)).unwrap_or_else(|_| {
        Err(ModelError::Tokenizer("tokenizer.json does not fit together: the tokenizers crate failed inside".into()))
    })
}

/// The plain-data view of an encoding. Segments come from the sequence each token belongs to
/// (whatever type ids the post-processor assigns: RoBERTa's are all 0); a special token takes the
/// segment of the token before it, so `[CLS] A [SEP]` is sentence A and the final `[SEP]` sentence B.
/// Token strings are the vocabulary's (as transformers' `convert_ids_to_tokens`): a piece a Unigram
/// model does not know reads `[UNK]` / `<unk>`, which is what the model sees.
fn tokens_of(tokenizer: &Tokenizer, encoding: &Encoding) -> Tokens {
    let mut segments = Vec::with_capacity(encoding.len());
    let mut current = 0u8;
    for sequence in encoding.get_sequence_ids() {
        if let Some(s) = sequence {
            current = u8::from(s > 0);
        }
        segments.push(current);
    }
    Tokens {
        tokens: encoding
            .get_ids()
            .iter()
            .zip(encoding.get_tokens())
            .map(|(&id, token)| tokenizer.id_to_token(id).unwrap_or_else(|| token.clone()))
            .collect(),
        ids: encoding.get_ids().to_vec(),
        segments,
        type_ids: encoding.get_type_ids().to_vec(),
        special: encoding.get_special_tokens_mask().iter().map(|&m| m != 0).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_skips_brackets_and_escaped_quotes_inside_strings() {
        assert_eq!(json_shape(r#"{"a": [[1]], "b": "[[[\"{{"}"#), (3, 7));
        assert_eq!(json_shape("[]"), (1, 0));
        let err = parse(&format!("{{\"model\": {}}}", "[".repeat(40) + &"]".repeat(40))).unwrap_err();
        assert!(err.contains("nested 41 levels deep"), "{err}");
    }
}
