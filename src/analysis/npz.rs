//! `NumPy` `.npz` archives (a zip of `.npy` arrays), loadable with `numpy.load`.

use std::io::{Seek, Write};

use zip::{CompressionMethod, ZipWriter, write::SimpleFileOptions};

/// One array to store in an archive.
pub enum NpyArray<'a> {
    /// float32 values with a shape.
    F32 { shape: Vec<usize>, data: &'a [f32] },
    /// int64 values with a shape.
    I64 { shape: Vec<usize>, data: Vec<i64> },
    /// A 1-D array of unicode strings (`<U{width}`).
    Str(&'a [String]),
}

/// Writes named arrays as an uncompressed `.npz` archive.
pub fn write_npz<W: Write + Seek>(out: W, arrays: &[(&str, NpyArray<'_>)]) -> std::io::Result<W> {
    let mut npz = NpzWriter::new(out);
    for (name, array) in arrays {
        npz.array(name, array)?;
    }
    npz.finish()
}

/// An uncompressed `.npz` archive written array by array; a float32 array's values can be
/// written in pieces as they are produced ([`Self::f32_streamed`]), so that a long dump never
/// holds them all. The bytes are those [`write_npz`] writes for the same arrays.
pub struct NpzWriter<W: Write + Seek> {
    zip: ZipWriter<W>,
}

impl<W: Write + Seek> NpzWriter<W> {
    /// An empty archive on `out`.
    pub fn new(out: W) -> Self {
        Self { zip: ZipWriter::new(out) }
    }

    fn start(&mut self, name: &str) -> std::io::Result<()> {
        let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored).large_file(true);
        self.zip.start_file(format!("{name}.npy"), options).map_err(std::io::Error::other)
    }

    /// Adds one array.
    pub fn array(&mut self, name: &str, array: &NpyArray<'_>) -> std::io::Result<()> {
        self.start(name)?;
        write_npy(&mut self.zip, array)
    }

    /// Adds a float32 array of `shape` whose values `fill` produces in order, handing each piece to
    /// the writer it is given (with [`write_f32`]); fewer or more values than the shape holds is
    /// an error.
    pub fn f32_streamed(
        &mut self,
        name: &str,
        shape: &[usize],
        fill: impl FnOnce(&mut F32Sink<'_>) -> std::io::Result<()>,
    ) -> std::io::Result<()>
    where
        W: Send,
    {
        let expected: usize = shape.iter().product();
        self.start(name)?;
        write_npy_header(&mut self.zip, "<f4", shape)?;
        let mut sink = F32Sink { w: &mut self.zip, written: 0 };
        fill(&mut sink)?;
        if sink.written != expected {
            return Err(std::io::Error::other(format!(
                "{name}: {} values written for a shape of {expected}",
                sink.written
            )));
        }
        Ok(())
    }

    /// Writes the archive's directory and returns the writer.
    pub fn finish(self) -> std::io::Result<W> {
        self.zip.finish().map_err(std::io::Error::other)
    }
}

/// Where [`NpzWriter::f32_streamed`] takes values, piece by piece.
pub struct F32Sink<'a> {
    w: &'a mut (dyn Write + Send),
    written: usize,
}

impl F32Sink<'_> {
    /// Appends `values` (little-endian float32).
    pub fn write(&mut self, values: &[f32]) -> std::io::Result<()> {
        write_f32(self.w, values)?;
        self.written += values.len();
        Ok(())
    }
}

/// Little-endian float32 values, written in blocks (not one 4-byte write per value).
fn write_f32(w: &mut (impl Write + ?Sized), values: &[f32]) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(values.len().min(1 << 16) * 4);
    for chunk in values.chunks(1 << 16) {
        bytes.clear();
        bytes.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
        w.write_all(&bytes)?;
    }
    Ok(())
}

/// The `.npy` version 1.0 header of an array of `descr` and `shape`.
fn write_npy_header(w: &mut impl Write, descr: &str, shape: &[usize]) -> std::io::Result<()> {
    let shape_text = match shape {
        [one] => format!("({one},)"),
        dims => format!("({})", dims.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Magic (6) + version (2) + length (2) + header, padded with spaces and a newline to 64 bytes.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    let len = u16::try_from(header.len()).map_err(std::io::Error::other)?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(header.as_bytes())
}

/// Writes one array in `.npy` format version 1.0.
fn write_npy(w: &mut impl Write, array: &NpyArray<'_>) -> std::io::Result<()> {
    let (descr, shape) = match array {
        NpyArray::F32 { shape, .. } => ("<f4".to_string(), shape.clone()),
        NpyArray::I64 { shape, .. } => ("<i8".to_string(), shape.clone()),
        NpyArray::Str(items) => {
            let width = items.iter().map(|s| s.chars().count()).max().unwrap_or(0).max(1);
            (format!("<U{width}"), vec![items.len()])
        }
    };
    write_npy_header(w, &descr, &shape)?;
    match array {
        NpyArray::F32 { data, .. } => write_f32(w, data)?,
        NpyArray::I64 { data, .. } => {
            for v in data {
                w.write_all(&v.to_le_bytes())?;
            }
        }
        NpyArray::Str(items) => {
            let width = descr[2..].parse::<usize>().unwrap_or(1);
            for s in *items {
                let mut n = 0;
                for c in s.chars() {
                    w.write_all(&(c as u32).to_le_bytes())?;
                    n += 1;
                }
                for _ in n..width {
                    w.write_all(&0u32.to_le_bytes())?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_headers_are_aligned_and_describe_the_array() {
        let mut buf = Vec::new();
        write_npy(&mut buf, &NpyArray::F32 { shape: vec![1, 2], data: &[1.0, 2.0] }).unwrap();
        let header_len = u16::from_le_bytes([buf[8], buf[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&buf[10..10 + header_len]).unwrap();
        assert!(header.contains("'descr': '<f4'") && header.contains("'shape': (1, 2)"));
        assert_eq!(&buf[10 + header_len..], &[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);
    }

    #[test]
    fn a_streamed_array_writes_the_bytes_of_a_whole_one() {
        let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25 - 3.0).collect();
        let tokens = vec!["a".to_string(), "bé".to_string()];
        let whole = write_npz(
            std::io::Cursor::new(Vec::new()),
            &[
                ("attentions", NpyArray::F32 { shape: vec![10, 100], data: &values }),
                ("tokens", NpyArray::Str(&tokens)),
            ],
        )
        .unwrap()
        .into_inner();
        let mut npz = NpzWriter::new(std::io::Cursor::new(Vec::new()));
        npz.f32_streamed("attentions", &[10, 100], |sink| values.chunks(100).try_for_each(|c| sink.write(c))).unwrap();
        npz.array("tokens", &NpyArray::Str(&tokens)).unwrap();
        assert_eq!(npz.finish().unwrap().into_inner(), whole);
        let mut short = NpzWriter::new(std::io::Cursor::new(Vec::new()));
        let err = short.f32_streamed("a", &[2, 2], |sink| sink.write(&[1.0])).unwrap_err();
        assert!(err.to_string().contains("1 values written"), "{err}");
    }

    #[test]
    fn strings_are_fixed_width_utf32() {
        let mut buf = Vec::new();
        let items = vec!["é".to_string(), "ab".to_string()];
        write_npy(&mut buf, &NpyArray::Str(&items)).unwrap();
        let header_len = u16::from_le_bytes([buf[8], buf[9]]) as usize;
        let header = std::str::from_utf8(&buf[10..10 + header_len]).unwrap();
        assert!(header.contains("'<U2'") && header.contains("(2,)"));
        assert_eq!(buf.len() - 10 - header_len, 2 * 2 * 4);
    }
}
