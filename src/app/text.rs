//! Text helpers shared by the features and their views.

/// `s` with its first letter upper-case (library messages start lower-case, view text does not).
pub fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}
