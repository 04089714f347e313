//! Word-level attention: word pieces (`##ing`, `Ġthe`, `▁the`) merged into words, following Clark
//! et al. 2019 — attention *to* a word is the sum over its pieces, attention *from* a word is the
//! mean over its pieces — so every row still sums to 1.

use std::ops::Range;

use super::run::Run;
use super::{Attention, Tokens};

/// How a tokenizer marks words in its pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceScheme {
    /// `##` starts a continuation piece (BERT's `WordPiece`).
    WordPiece,
    /// `Ġ` (byte-level BPE) or `▁` (`SentencePiece`) starts a new word.
    WordStart,
}

/// Which marking `tokens` use: word-start markers if any token carries one, else `WordPiece`.
pub fn piece_scheme(tokens: &Tokens) -> PieceScheme {
    let word_start = tokens
        .tokens
        .iter()
        .zip(&tokens.special)
        .any(|(t, &special)| !special && (t.starts_with('Ġ') || t.starts_with('▁') || t.starts_with('Ċ')));
    if word_start { PieceScheme::WordStart } else { PieceScheme::WordPiece }
}

/// Whether a piece is punctuation only (after dropping the markers).
pub fn is_punctuation(token: &str) -> bool {
    let t = token.trim_start_matches(['Ġ', '▁']);
    !t.is_empty() && t.chars().all(is_punctuation_char)
}

fn is_punctuation_char(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c, '\u{00A1}' | '\u{00A7}' | '\u{00AB}' | '\u{00B6}' | '\u{00B7}' | '\u{00BB}' | '\u{00BF}')
        || ('\u{2010}'..='\u{2027}').contains(&c)
        || ('\u{2030}'..='\u{205E}').contains(&c)
        || ('\u{3001}'..='\u{3003}').contains(&c)
        || ('\u{3008}'..='\u{3011}').contains(&c)
        || ('\u{FF01}'..='\u{FF0F}').contains(&c)
}

/// The token ranges that form words. Special tokens are words of their own; a word never spans the
/// two sentences of a pair. With word-start markers, a punctuation piece is its own word (GPT-2
/// writes "tired." as "Ġtired" "."), as BERT's pre-tokenizer makes it.
pub fn word_spans(tokens: &Tokens) -> Vec<Range<usize>> {
    let scheme = piece_scheme(tokens);
    let mut spans: Vec<Range<usize>> = Vec::new();
    for (i, token) in tokens.tokens.iter().enumerate() {
        let continues = i > 0
            && !tokens.special[i]
            && !tokens.special[i - 1]
            && tokens.segments[i] == tokens.segments[i - 1]
            && match scheme {
                PieceScheme::WordPiece => token.starts_with("##"),
                PieceScheme::WordStart => {
                    !(token.starts_with(['Ġ', '▁', 'Ċ'])
                        || is_punctuation(token)
                        || is_punctuation(&tokens.tokens[i - 1]))
                }
            };
        match spans.last_mut() {
            Some(last) if continues => last.end = i + 1,
            _ => spans.push(i..i + 1),
        }
    }
    spans
}

/// The word made of `pieces`: markers dropped and pieces joined ("Ġcro" "ss" → "cross",
/// "em" "##bed" "##ding" → "embedding").
pub fn word_text(pieces: &[String]) -> String {
    let mut out = String::new();
    for (i, p) in pieces.iter().enumerate() {
        let p = if i == 0 { p.as_str() } else { p.strip_prefix("##").unwrap_or(p) };
        out.push_str(p);
    }
    if pieces.len() > 1 {
        // Keep a leading word-start marker (the label drops it) but no marker inside the word.
        let (first, rest) = out.split_at(out.chars().next().map_or(0, char::len_utf8));
        return format!("{first}{}", rest.replace(['Ġ', '▁'], ""));
    }
    out
}

/// An `n × n` matrix merged to `spans.len()` words: columns summed, rows averaged.
pub fn merge_matrix(matrix: &[f32], n: usize, spans: &[Range<usize>]) -> Vec<f32> {
    let mut out = vec![0.0f32; spans.len() * spans.len()];
    super::long::pool_matrix_into(matrix, n, spans, spans, false, &mut out);
    out
}

/// The tokens of the words: joined text, the first piece's id, segment and specialness.
pub fn merge_tokens(tokens: &Tokens, spans: &[Range<usize>]) -> Tokens {
    Tokens {
        tokens: spans.iter().map(|s| word_text(&tokens.tokens[s.clone()])).collect(),
        ids: spans.iter().map(|s| tokens.ids[s.start]).collect(),
        segments: spans.iter().map(|s| tokens.segments[s.start]).collect(),
        type_ids: spans.iter().map(|s| tokens.type_ids.get(s.start).copied().unwrap_or(0)).collect(),
        special: spans.iter().map(|s| tokens.special[s.start]).collect(),
    }
}

/// The sinks' shares merged to words: a word's row is the mean of its pieces' rows (as
/// [`merge_matrix`] pools them), so it still sums to 1 with the sink's share.
pub fn merge_sinks(sinks: &super::Sinks, spans: &[Range<usize>]) -> super::Sinks {
    let (layers, heads) = (sinks.layers(), sinks.heads());
    let mut values = Vec::with_capacity(layers * heads * spans.len());
    for l in 0..layers {
        for h in 0..heads {
            values.extend(super::long::mean_rows(sinks.head(l, h), 1, spans));
        }
    }
    super::Sinks::new(layers, heads, spans.len(), values).expect("merged shape is consistent")
}

/// Every head of every layer merged to words.
pub fn merge_attention(attention: &Attention, spans: &[Range<usize>]) -> Attention {
    let (layers, heads, n) = (attention.layers(), attention.heads(), attention.seq_len());
    let mut data = Vec::with_capacity(layers * heads * spans.len() * spans.len());
    for l in 0..layers {
        for h in 0..heads {
            data.extend(merge_matrix(attention.head(l, h), n, spans));
        }
    }
    Attention::new(layers, heads, spans.len(), data).expect("merged shape is consistent")
}

/// The run at word level: tokens and attention merged, the hidden state averaged per word. The
/// per-piece query/key vectors (neuron view) do not merge and are dropped.
pub fn merge_run(run: &Run) -> Run {
    let spans = word_spans(&run.tokens);
    let hidden = run.last_hidden.len().checked_div(run.tokens.len()).unwrap_or(0);
    let last_hidden = super::long::mean_rows(&run.last_hidden, hidden, &spans);
    Run {
        model_name: run.model_name.clone(),
        tokens: merge_tokens(&run.tokens, &spans),
        attention: merge_attention(&run.attention, &spans),
        sinks: run.sinks.as_ref().map(|s| merge_sinks(s, &spans)),
        neuron: None,
        last_hidden,
        truncation: run.truncation.clone(),
        intervention: run.intervention.clone(),
        playground: run.playground,
        causal: run.causal,
        // A window counts tokens; merged words have no single distance, so their cells show
        // the (zero) weights the window left.
        window: None,
        sliding_layers: Vec::new(),
        // The prompt ends at the first word holding a generated piece.
        prompt_len: run.prompt_len.map(|p| spans.iter().take_while(|s| s.end <= p).count()),
        // Word merging covers the source; the decoder side stays at token level.
        decoder: run.decoder.clone(),
        key_tokens: None,
        stack: run.stack,
        long: run.long.clone(),
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // exact values are the point of these tests
mod tests {
    use super::*;

    fn tokens(list: &[&str], special: &[bool]) -> Tokens {
        Tokens {
            tokens: list.iter().map(ToString::to_string).collect(),
            ids: (0..list.len() as u32).collect(),
            segments: vec![0; list.len()],
            type_ids: vec![0; list.len()],
            special: special.to_vec(),
        }
    }

    #[test]
    fn wordpiece_spans_join_hash_pieces_and_keep_specials_apart() {
        let t = tokens(&["[CLS]", "em", "##bed", "##ding", "s", "[SEP]"], &[true, false, false, false, false, true]);
        assert_eq!(piece_scheme(&t), PieceScheme::WordPiece);
        assert_eq!(word_spans(&t), vec![0..1, 1..4, 4..5, 5..6]);
        assert_eq!(merge_tokens(&t, &word_spans(&t)).tokens, vec!["[CLS]", "embedding", "s", "[SEP]"]);
    }

    #[test]
    fn byte_level_spans_start_at_markers_and_split_punctuation() {
        let t = tokens(&["The", "Ġcro", "ss", "ing", "Ġdidn", "'t", "Ġend", "."], &[false; 8]);
        assert_eq!(piece_scheme(&t), PieceScheme::WordStart);
        assert_eq!(word_spans(&t), vec![0..1, 1..4, 4..6, 6..7, 7..8]);
        let words = merge_tokens(&t, &word_spans(&t));
        assert_eq!(words.tokens, vec!["The", "Ġcrossing", "Ġdidn't", "Ġend", "."]);
        assert_eq!(words.label(1), "crossing");
    }

    #[test]
    fn merging_sums_columns_and_averages_rows_by_hand() {
        // Tokens 0 | 1 2 (one word of two pieces) | 3.
        let spans = vec![0..1, 1..3, 3..4];
        #[rustfmt::skip]
        let m = [
            0.1, 0.2, 0.3, 0.4,
            0.5, 0.5, 0.0, 0.0,
            0.0, 0.25, 0.25, 0.5,
            1.0, 0.0, 0.0, 0.0,
        ];
        let merged = merge_matrix(&m, 4, &spans);
        #[rustfmt::skip]
        let expected = [
            0.1, 0.5, 0.4,
            0.25, 0.5, 0.25,
            1.0, 0.0, 0.0,
        ];
        for (a, b) in merged.iter().zip(expected) {
            assert!((a - b).abs() < 1e-6, "{merged:?}");
        }
        for row in merged.chunks(3) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        }
    }

    #[test]
    fn words_never_span_the_two_sentences() {
        let mut t = tokens(&["a", "##b", "##c", "d"], &[false; 4]);
        t.segments = vec![0, 0, 1, 1];
        assert_eq!(word_spans(&t), vec![0..2, 2..3, 3..4]);
    }
}
