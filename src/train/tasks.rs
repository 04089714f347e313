//! The tasks, generated on the fly from a seed: their vocabularies (spelled so that the tokens,
//! written separated by spaces, tokenize back to their ids), training batches, held-out sets kept
//! apart from the training ones by a fixed hash, and a probe input for the views.

use super::config::{Pooling, TaskKind, TrainConfig};

/// `SplitMix64`: small, fast and the same on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`, decorrelated per `stream`.
    pub fn new(seed: u64, stream: u64) -> Self {
        Self(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n ≥ 1).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in (0, 1].
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
}

/// FNV-1a: which side of the train / held-out split an example falls on (fixed, not seeded, so
/// every run and every variant of the course's experiment holds out the same examples).
fn held_out(key: &[u32]) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &k in key {
        for b in k.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h.is_multiple_of(5)
}

/// What a batch asks the model to predict.
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// The next token at every position from `from` on (the sequence's own ids, shifted).
    Next {
        /// First position whose next token counts.
        from: usize,
    },
    /// One label per sequence; sequences padded to the longest with id 0.
    Labels {
        /// 1 = positive, 0 = negative.
        labels: Vec<u32>,
        /// Each sequence's length before padding.
        lengths: Vec<usize>,
        /// Whether each sequence's label depends on word order (the contrast sentences).
        order_dependent: Vec<bool>,
    },
}

/// `rows` sequences of `len` tokens, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Token ids.
    pub ids: Vec<u32>,
    /// Sequences.
    pub rows: usize,
    /// Tokens per sequence (padded).
    pub len: usize,
    /// What is predicted.
    pub targets: Targets,
}

impl Batch {
    /// Targets the batch's loss averages over: every sequence's next tokens from `from` on, or
    /// one label per sequence.
    pub fn counted(&self) -> usize {
        match &self.targets {
            Targets::Next { from } => self.rows * (self.len.saturating_sub(1)).saturating_sub(*from),
            Targets::Labels { labels, .. } => labels.len(),
        }
    }

    /// The batch cut into `parts` runs of consecutive sequences, as even as can be (the first ones
    /// a sequence longer), fewer when there are fewer sequences; every part keeps the padded length.
    pub fn split(&self, parts: usize) -> Vec<Self> {
        let parts = parts.clamp(1, self.rows.max(1));
        let (base, extra) = (self.rows / parts, self.rows % parts);
        let mut start = 0;
        (0..parts)
            .map(|p| {
                let rows = base + usize::from(p < extra);
                let range = start..start + rows;
                start += rows;
                let targets = match &self.targets {
                    Targets::Next { from } => Targets::Next { from: *from },
                    Targets::Labels { labels, lengths, order_dependent } => Targets::Labels {
                        labels: labels[range.clone()].to_vec(),
                        lengths: lengths[range.clone()].to_vec(),
                        order_dependent: order_dependent[range.clone()].to_vec(),
                    },
                };
                let ids = self.ids[range.start * self.len..range.end * self.len].to_vec();
                Self { ids, rows, len: self.len, targets }
            })
            .collect()
    }
}

/// A task's vocabulary and generators.
#[derive(Debug, Clone)]
pub struct Task {
    /// Which task.
    pub kind: TaskKind,
    /// Token strings by id.
    pub vocab: Vec<String>,
    /// Random tokens (induction), the modulus (modular addition).
    n: usize,
    /// Sequence length of the decoder tasks.
    context: usize,
    pooling: Pooling,
}

/// The unknown word: in every vocabulary (last for the decoder tasks), never trained.
pub const UNK: &str = "[UNK]";
/// Padding (id 0 of the sentiment vocabulary).
pub const PAD: &str = "[PAD]";
/// The classifier's summary token (id 2 of the sentiment vocabulary).
pub const CLS: &str = "[CLS]";

const CONSONANTS: &[u8] = b"bdfgklmnprstvz";
const VOWELS: &[u8] = b"aeiou";

impl Task {
    /// The task `cfg` names.
    pub fn new(cfg: &TrainConfig) -> Self {
        let (n, vocab) = match cfg.task {
            TaskKind::Induction => {
                let words: Vec<String> = if cfg.vocab <= CONSONANTS.len() * VOWELS.len() {
                    // Syllables ("ka", "po", …): a repeated sequence is easy to read in the views.
                    (0..cfg.vocab)
                        .map(|i| {
                            let (c, v) = (CONSONANTS[i / VOWELS.len()], VOWELS[i % VOWELS.len()]);
                            String::from_utf8(vec![c, v]).unwrap_or_default()
                        })
                        .collect()
                } else {
                    (0..cfg.vocab).map(|i| format!("t{i}")).collect()
                };
                (cfg.vocab, words)
            }
            TaskKind::Sort | TaskKind::Reverse => (10, (0..10).map(|d| d.to_string()).chain(["=".into()]).collect()),
            TaskKind::ModAdd => {
                (cfg.vocab, (0..cfg.vocab).map(|d| d.to_string()).chain(["+".into(), "=".into()]).collect())
            }
            TaskKind::Sentiment => (0, sentiment_vocabulary()),
        };
        let mut vocab = vocab;
        if cfg.task != TaskKind::Sentiment {
            vocab.push(UNK.into());
        }
        Self { kind: cfg.task, vocab, n, context: cfg.context, pooling: cfg.pooling }
    }

    /// Rows of the embedding table (and outputs of a decoder).
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The longest input the task makes (the position table's length).
    pub fn max_len(&self) -> usize {
        match self.kind {
            TaskKind::Induction => 2 * (self.context / 2),
            TaskKind::Sort | TaskKind::Reverse => 2 * self.list_len() + 1,
            TaskKind::ModAdd => 5,
            TaskKind::Sentiment => SENTENCE_MAX + 1,
        }
    }

    fn list_len(&self) -> usize {
        (self.context - 1) / 2
    }

    fn id(&self, word: &str) -> u32 {
        self.vocab.iter().position(|w| w == word).unwrap_or(0) as u32
    }

    /// A training batch (examples of the held-out set never appear).
    pub fn batch(&self, rng: &mut Rng, rows: usize) -> Batch {
        self.sample(rng, rows, false)
    }

    /// A held-out batch.
    pub fn held_out_batch(&self, rng: &mut Rng, rows: usize) -> Batch {
        self.sample(rng, rows, true)
    }

    fn sample(&self, rng: &mut Rng, rows: usize, test: bool) -> Batch {
        match self.kind {
            TaskKind::Induction => {
                // Random sequences: a repeat of a training sequence is vanishingly rare; the split
                // still holds exactly.
                let half = self.context / 2;
                let mut ids = Vec::with_capacity(rows * 2 * half);
                for _ in 0..rows {
                    let first = loop {
                        let first: Vec<u32> = (0..half).map(|_| rng.below(self.n) as u32).collect();
                        if held_out(&first) == test {
                            break first;
                        }
                    };
                    ids.extend_from_slice(&first);
                    ids.extend_from_slice(&first);
                }
                Batch { ids, rows, len: 2 * half, targets: Targets::Next { from: 0 } }
            }
            TaskKind::Sort | TaskKind::Reverse => {
                let m = self.list_len();
                let mut ids = Vec::with_capacity(rows * (2 * m + 1));
                for _ in 0..rows {
                    let list = loop {
                        let list: Vec<u32> = (0..m).map(|_| rng.below(10) as u32).collect();
                        if held_out(&list) == test {
                            break list;
                        }
                    };
                    let mut out = list.clone();
                    if self.kind == TaskKind::Sort {
                        out.sort_unstable();
                    } else {
                        out.reverse();
                    }
                    ids.extend_from_slice(&list);
                    ids.push(10);
                    ids.extend_from_slice(&out);
                }
                Batch { ids, rows, len: 2 * m + 1, targets: Targets::Next { from: m } }
            }
            TaskKind::ModAdd => {
                let p = self.n;
                let (plus, equals) = (p as u32, p as u32 + 1);
                let mut ids = Vec::with_capacity(rows * 5);
                for _ in 0..rows {
                    // A third of the pairs train (the grokking setting), the rest are held out.
                    let (a, b) = loop {
                        let (a, b) = (rng.below(p) as u32, rng.below(p) as u32);
                        let pair_test = !modadd_trains(a, b);
                        if pair_test == test {
                            break (a, b);
                        }
                    };
                    ids.extend_from_slice(&[a, plus, b, equals, (a + b) % p as u32]);
                }
                Batch { ids, rows, len: 5, targets: Targets::Next { from: 3 } }
            }
            TaskKind::Sentiment => {
                let sentences: Vec<Sentence> = (0..rows)
                    .map(|_| {
                        loop {
                            let s = Sentence::sample(rng);
                            let ids: Vec<u32> = s.words.iter().map(|w| self.id(w)).collect();
                            if held_out(&ids) == test {
                                break s;
                            }
                        }
                    })
                    .collect();
                self.sentences_batch(&sentences)
            }
        }
    }

    fn sentences_batch(&self, sentences: &[Sentence]) -> Batch {
        let cls = self.pooling == Pooling::Cls;
        let encoded: Vec<Vec<u32>> = sentences
            .iter()
            .map(|s| {
                let mut ids: Vec<u32> = if cls { vec![self.id(CLS)] } else { Vec::new() };
                ids.extend(s.words.iter().map(|w| self.id(w)));
                ids
            })
            .collect();
        let len = encoded.iter().map(Vec::len).max().unwrap_or(1);
        let mut ids = Vec::with_capacity(sentences.len() * len);
        for e in &encoded {
            ids.extend_from_slice(e);
            ids.extend(std::iter::repeat_n(0, len - e.len()));
        }
        Batch {
            ids,
            rows: sentences.len(),
            len,
            targets: Targets::Labels {
                labels: sentences.iter().map(|s| u32::from(s.positive)).collect(),
                lengths: encoded.iter().map(Vec::len).collect(),
                order_dependent: sentences.iter().map(|s| s.contrast).collect(),
            },
        }
    }

    /// Every held-out example of modular addition, or a fixed sample of the others (`rows` of them,
    /// from `seed`): what the reported accuracy is measured on.
    pub fn evaluation_set(&self, seed: u64, rows: usize) -> Batch {
        if self.kind == TaskKind::ModAdd {
            let p = self.n as u32;
            let mut ids = Vec::new();
            for a in 0..p {
                for b in 0..p {
                    if !modadd_trains(a, b) {
                        ids.extend_from_slice(&[a, p, b, p + 1, (a + b) % p]);
                    }
                }
            }
            let rows = ids.len() / 5;
            return Batch { ids, rows, len: 5, targets: Targets::Next { from: 3 } };
        }
        self.held_out_batch(&mut Rng::new(seed, 0xE7A1), rows)
    }

    /// The induction probe's tokens: random tokens repeated once, the first half repeating none
    /// (when the vocabulary has that many), so that every token of the second half has one earlier
    /// occurrence — the first and the most recent occurrence are the same token. None for the
    /// other tasks.
    pub fn probe_ids(&self) -> Option<Vec<u32>> {
        if self.kind != TaskKind::Induction {
            return None;
        }
        let half = self.context / 2;
        let mut rng = Rng::new(7, 0x9803);
        let first: Vec<u32> = if self.n >= half {
            // A partial Fisher–Yates shuffle: `half` distinct tokens.
            let mut pool: Vec<u32> = (0..self.n as u32).collect();
            for i in 0..half {
                let j = i + rng.below(self.n - i);
                pool.swap(i, j);
            }
            pool.truncate(half);
            pool
        } else {
            (0..half).map(|_| rng.below(self.n) as u32).collect()
        };
        Some([first.as_slice(), first.as_slice()].concat())
    }

    /// The probe as a batch of one sequence (None for tasks without [`Self::probe_ids`]).
    pub fn probe_batch(&self) -> Option<Batch> {
        let ids = self.probe_ids()?;
        Some(Batch { rows: 1, len: ids.len(), ids, targets: Targets::Next { from: 0 } })
    }

    /// A probe input for the views: text that tokenizes back to a typical held-out example.
    pub fn probe(&self) -> String {
        match self.kind {
            TaskKind::Induction => {
                let ids = self.probe_ids().unwrap_or_default();
                ids.iter().map(|&i| self.vocab[i as usize].as_str()).collect::<Vec<_>>().join(" ")
            }
            TaskKind::Sort | TaskKind::Reverse => {
                let m = self.list_len();
                let list: Vec<u32> = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8].iter().copied().cycle().take(m).collect();
                let mut out = list.clone();
                if self.kind == TaskKind::Sort {
                    out.sort_unstable();
                } else {
                    out.reverse();
                }
                let words = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
                format!("{} = {}", words(&list), words(&out))
            }
            TaskKind::ModAdd => {
                let p = self.n;
                format!("{} + {} = {}", 12 % p, 30 % p, 42 % p)
            }
            TaskKind::Sentiment => "i did not expect to enjoy it , but i loved it".into(),
        }
    }
}

/// Whether the pair `a + b` is in the training third of modular addition.
fn modadd_trains(a: u32, b: u32) -> bool {
    let mut h: u64 = 0x51_7cc1_b727_220a ^ (u64::from(a) << 32 | u64::from(b));
    h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    h = (h ^ (h >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    (h ^ (h >> 33)) % 10 < 3
}

// ---- The course's review language -------------------------------------------------------------

const SUBJECTS: &[&str] = &["the plot", "the acting", "the film", "the music", "the ending", "the story"];
const GOOD: &[&str] = &["good", "great", "fun", "clever", "moving"];
const BAD: &[&str] = &["bad", "boring", "dull", "awful", "weak"];
/// Verbs in the past tense, with their polarity.
const FELT: &[(&str, bool)] =
    &[("loved", true), ("liked", true), ("enjoyed", true), ("hated", false), ("disliked", false)];
/// The same verbs after "did not".
const FEEL: &[(&str, bool)] = &[("love", true), ("like", true), ("enjoy", true), ("hate", false), ("dislike", false)];
/// Longest sentence in words: "i did not expect to enjoy it , but i did not hate it" (14), with
/// room to spare for a student's own probe.
const SENTENCE_MAX: usize = 24;

fn sentiment_vocabulary() -> Vec<String> {
    let mut words: Vec<String> =
        [PAD, UNK, CLS, ",", "but", "was", "not", "i", "it", "did", "expect", "to", "at", "all"]
            .map(String::from)
            .into();
    let mut add = |w: &str| {
        if !words.iter().any(|x| x == w) {
            words.push(w.to_string());
        }
    };
    for s in SUBJECTS {
        s.split(' ').for_each(&mut add);
    }
    GOOD.iter().chain(BAD).for_each(|w| add(w));
    FELT.iter().chain(FEEL).for_each(|(w, _)| add(w));
    words
}

/// A review and its label.
#[derive(Debug, Clone)]
struct Sentence {
    words: Vec<String>,
    positive: bool,
    /// "A , but B": the label is B's, and the same words in the other order mean the opposite.
    contrast: bool,
}

/// One clause and whether it is positive.
fn clause(rng: &mut Rng) -> (String, bool) {
    let pick = |rng: &mut Rng, list: &[&'static str]| list[rng.below(list.len())];
    let adjective = |rng: &mut Rng| {
        if rng.below(2) == 0 { (pick(rng, GOOD), true) } else { (pick(rng, BAD), false) }
    };
    match rng.below(6) {
        0 | 1 => {
            let (adj, good) = adjective(rng);
            (format!("{} was {adj}", pick(rng, SUBJECTS)), good)
        }
        2 => {
            let (adj, good) = adjective(rng);
            (format!("{} was not {adj}", pick(rng, SUBJECTS)), !good)
        }
        3 => {
            let (verb, good) = FELT[rng.below(FELT.len())];
            (format!("i {verb} it"), good)
        }
        4 => {
            let (verb, good) = FEEL[rng.below(FEEL.len())];
            (format!("i did not {verb} it"), !good)
        }
        _ => {
            // A low expectation: "i did not expect to enjoy it" (then, often, "but i loved it").
            let verb = ["enjoy", "like", "love"][rng.below(3)];
            (format!("i did not expect to {verb} it"), false)
        }
    }
}

impl Sentence {
    fn sample(rng: &mut Rng) -> Self {
        let (text, positive, contrast) = match rng.below(10) {
            0..=2 => {
                let (text, positive) = clause(rng);
                (text, positive, false)
            }
            3 => {
                // "not bad at all": positive.
                let (adj, good) = if rng.below(2) == 0 {
                    (GOOD[rng.below(GOOD.len())], true)
                } else {
                    (BAD[rng.below(BAD.len())], false)
                };
                (format!("not {adj} at all"), !good, false)
            }
            _ => {
                let (first, a) = clause(rng);
                let (second, b) = loop {
                    let c = clause(rng);
                    if c.1 != a {
                        break c;
                    }
                };
                (format!("{first} , but {second}"), b, true)
            }
        };
        Self { words: text.split(' ').map(String::from).collect(), positive, contrast }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(kind: TaskKind) -> Task {
        Task::new(&TrainConfig::for_task(kind))
    }

    #[test]
    fn induction_repeats_its_first_half_and_the_split_holds() {
        let t = task(TaskKind::Induction);
        assert_eq!(t.vocab_size(), 65);
        let mut rng = Rng::new(1, 2);
        let b = t.batch(&mut rng, 8);
        assert_eq!((b.rows, b.len), (8, 64));
        for row in b.ids.chunks(64) {
            assert_eq!(row[..32], row[32..]);
            assert!(!held_out(&row[..32]));
            assert!(row.iter().all(|&id| id < 64));
        }
        let h = t.held_out_batch(&mut rng, 8);
        assert!(h.ids.chunks(64).all(|row| held_out(&row[..32])));
    }

    #[test]
    fn digit_tasks_write_the_answer_after_the_equals_sign() {
        let mut rng = Rng::new(3, 0);
        for kind in [TaskKind::Sort, TaskKind::Reverse] {
            let b = task(kind).batch(&mut rng, 4);
            assert_eq!((b.len, b.targets.clone()), (13, Targets::Next { from: 6 }));
            for row in b.ids.chunks(13) {
                assert_eq!(row[6], 10);
                let mut want = row[..6].to_vec();
                if kind == TaskKind::Sort {
                    want.sort_unstable();
                } else {
                    want.reverse();
                }
                assert_eq!(row[7..], want[..]);
            }
        }
        let b = task(TaskKind::ModAdd).batch(&mut rng, 64);
        for row in b.ids.chunks(5) {
            assert_eq!(row[4], (row[0] + row[2]) % 59);
            assert!(modadd_trains(row[0], row[2]));
        }
        let all = task(TaskKind::ModAdd).evaluation_set(0, 0);
        let trains = (0..59).flat_map(|a| (0..59).map(move |b| (a, b))).filter(|&(a, b)| modadd_trains(a, b)).count();
        assert_eq!(all.rows + trains, 59 * 59);
        assert!((trains as f64 / (59.0 * 59.0) - 0.3).abs() < 0.05, "{trains}");
    }

    #[test]
    fn reviews_have_order_dependent_labels_and_spell_their_vocabulary() {
        let t = task(TaskKind::Sentiment);
        let mut rng = Rng::new(0, 0);
        let b = t.batch(&mut rng, 400);
        let Targets::Labels { labels, lengths, order_dependent } = &b.targets else { panic!() };
        assert!(lengths.iter().all(|l| (3..=SENTENCE_MAX).contains(l)));
        let positive = labels.iter().filter(|&&l| l == 1).count();
        assert!((120..280).contains(&positive), "{positive}");
        let contrast = order_dependent.iter().filter(|&&c| c).count();
        assert!((180..320).contains(&contrast), "{contrast}");
        // No unknown words: every word is in the vocabulary.
        assert!(b.ids.iter().all(|&id| id != 1));
        let text = t.probe();
        assert!(text.split(' ').all(|w| t.vocab.iter().any(|v| v == w)), "{text}");
    }
}
