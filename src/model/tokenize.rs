//! `tokenizer.json` through the `tokenizers` crate, with baked-in padding removed and truncation to
//! the model's positions (keeping the final special token, as `truncation=True` does).

use std::path::Path;

use tokenizers::{Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::ModelError;
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
    /// Reads `tokenizer.json`, turning off any padding or truncation stored in it.
    pub fn from_file(path: &Path, max_len: usize) -> Result<Self, ModelError> {
        let plain =
            Tokenizer::from_file(path).map_err(|e| ModelError::Tokenizer(format!("{}: {e}", path.display())))?;
        Self::from_tokenizer(plain, max_len)
    }

    /// Builds from `tokenizer.json` text (a GGUF file's vocabulary, converted).
    pub fn from_json(json: &str, max_len: usize) -> Result<Self, ModelError> {
        let plain: Tokenizer = json.parse().map_err(|e| ModelError::Tokenizer(format!("tokenizer from GGUF: {e}")))?;
        Self::from_tokenizer(plain, max_len)
    }

    fn from_tokenizer(mut plain: Tokenizer, max_len: usize) -> Result<Self, ModelError> {
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

    /// Whether a token id is one of the tokenizer's special tokens.
    pub fn is_special(&self, id: u32) -> bool {
        self.plain
            .get_added_vocabulary()
            .simple_id_to_token(id)
            .is_some_and(|t| self.plain.get_added_tokens_decoder().get(&id).is_some_and(|a| a.special) && !t.is_empty())
    }

    /// Text of token ids, special tokens skipped (what a continuation reads as).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.plain.decode(ids, true).unwrap_or_default()
    }

    /// The longest input in tokens, special tokens included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Tokenizes a sentence (or a pair), with special tokens, truncated to `max_len` with a notice.
    pub fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoded, ModelError> {
        let enc = |t: &Tokenizer| match pair {
            Some(b) => t.encode((text, b), self.add_special),
            None => t.encode(text, self.add_special),
        };
        let full = enc(&self.plain).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let (encoding, truncation) = if full.len() > self.max_len {
            let cut = enc(&self.truncating).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
            let notice =
                format!("input truncated to {} tokens (the model's maximum); it had {} tokens", cut.len(), full.len());
            (cut, Some(notice))
        } else {
            (full, None)
        };
        Ok(Encoded { tokens: tokens_of(&self.plain, &encoding), truncation })
    }

    /// Tokenizes `text` and keeps exactly `n` tokens (special tokens included), repeating the text
    /// until it is long enough: the input for speed measurements.
    pub fn encode_exactly(&self, text: &str, n: usize) -> Result<Tokens, ModelError> {
        let mut t = self.truncating.clone();
        t.with_truncation(Some(TruncationParams { max_length: n, ..TruncationParams::default() }))
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let mut long = text.to_string();
        loop {
            let e = t.encode(long.as_str(), true).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
            if e.len() >= n || long.len() > 64 * 1024 * 1024 {
                return Ok(tokens_of(&self.plain, &e));
            }
            long = format!("{long} {text}");
        }
    }
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
