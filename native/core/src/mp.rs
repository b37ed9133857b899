//! MessagePack as msgspec writes and reads the package's records: the smallest encoding of each integer, every
//! float as float64, and a struct's map header sized by its number of fields (msgspec reserves the header before
//! it knows how many fields `omit_defaults` leaves out). Reading is as lenient as msgspec's: any integer width, an
//! integer where a float is due, a shorter array-like struct (its last fields default) or a longer one (the rest
//! ignored), and map fields in any order, unknown ones skipped.

use std::fmt;

/// A malformed record: what was expected where.
#[derive(Debug)]
pub struct Malformed(pub &'static str);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}", self.0)
    }
}

pub type Result<T> = std::result::Result<T, Malformed>;

/// A value of any type (a source's `metadata`), kept as msgspec decodes it into Python objects.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

/// A reader over one encoded record.
pub struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }

    pub fn finished(&self) -> bool {
        self.at == self.data.len()
    }

    /// The offset of the next value.
    pub fn at(&self) -> usize {
        self.at
    }

    fn byte(&mut self, what: &'static str) -> Result<u8> {
        let b = *self.data.get(self.at).ok_or(Malformed(what))?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or(Malformed(what))?;
        let s = self.data.get(self.at..end).ok_or(Malformed(what))?;
        self.at = end;
        Ok(s)
    }

    fn be(&mut self, n: usize, what: &'static str) -> Result<u64> {
        Ok(self
            .take(n, what)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    pub fn peek(&self) -> Option<u8> {
        self.data.get(self.at).copied()
    }

    /// Consume a nil if one is next.
    pub fn nil(&mut self) -> bool {
        if self.peek() == Some(0xc0) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    pub fn boolean(&mut self) -> Result<bool> {
        match self.byte("a bool")? {
            0xc2 => Ok(false),
            0xc3 => Ok(true),
            _ => Err(Malformed("a bool")),
        }
    }

    pub fn int(&mut self) -> Result<i64> {
        const W: &str = "an integer";
        let m = self.byte(W)?;
        Ok(match m {
            0x00..=0x7f => i64::from(m),
            0xe0..=0xff => i64::from(m as i8),
            0xcc => self.be(1, W)? as i64,
            0xcd => self.be(2, W)? as i64,
            0xce => self.be(4, W)? as i64,
            0xcf => i64::try_from(self.be(8, W)?).map_err(|_| Malformed(W))?,
            0xd0 => i64::from(self.be(1, W)? as u8 as i8),
            0xd1 => i64::from(self.be(2, W)? as u16 as i16),
            0xd2 => i64::from(self.be(4, W)? as u32 as i32),
            0xd3 => self.be(8, W)? as i64,
            _ => return Err(Malformed(W)),
        })
    }

    pub fn float(&mut self) -> Result<f64> {
        match self.peek() {
            Some(0xcb) => {
                self.at += 1;
                Ok(f64::from_bits(self.be(8, "a float")?))
            }
            Some(0xca) => {
                self.at += 1;
                Ok(f64::from(f32::from_bits(self.be(4, "a float")? as u32)))
            }
            _ => Ok(self.int().map_err(|_| Malformed("a float"))? as f64),
        }
    }

    fn str_len(&mut self) -> Result<usize> {
        const W: &str = "a string";
        let m = self.byte(W)?;
        Ok(match m {
            0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.be(1, W)? as usize,
            0xda => self.be(2, W)? as usize,
            0xdb => self.be(4, W)? as usize,
            _ => return Err(Malformed(W)),
        })
    }

    pub fn str(&mut self) -> Result<&'a str> {
        let n = self.str_len()?;
        std::str::from_utf8(self.take(n, "a string")?).map_err(|_| Malformed("UTF-8"))
    }

    pub fn string(&mut self) -> Result<String> {
        Ok(self.str()?.to_owned())
    }

    pub fn bin(&mut self) -> Result<&'a [u8]> {
        const W: &str = "bytes";
        let n = match self.byte(W)? {
            0xc4 => self.be(1, W)? as usize,
            0xc5 => self.be(2, W)? as usize,
            0xc6 => self.be(4, W)? as usize,
            _ => return Err(Malformed(W)),
        };
        self.take(n, W)
    }

    pub fn array(&mut self) -> Result<usize> {
        const W: &str = "an array";
        let m = self.byte(W)?;
        Ok(match m {
            0x90..=0x9f => usize::from(m & 0x0f),
            0xdc => self.be(2, W)? as usize,
            0xdd => self.be(4, W)? as usize,
            _ => return Err(Malformed(W)),
        })
    }

    pub fn map(&mut self) -> Result<usize> {
        const W: &str = "a map";
        let m = self.byte(W)?;
        Ok(match m {
            0x80..=0x8f => usize::from(m & 0x0f),
            0xde => self.be(2, W)? as usize,
            0xdf => self.be(4, W)? as usize,
            _ => return Err(Malformed(W)),
        })
    }

    /// Read any value (skipping an unknown field reads it too).
    pub fn value(&mut self) -> Result<Value> {
        const W: &str = "a value";
        let m = self.peek().ok_or(Malformed(W))?;
        Ok(match m {
            0xc0 => {
                self.at += 1;
                Value::Nil
            }
            0xc2 | 0xc3 => Value::Bool(self.boolean()?),
            0xca | 0xcb => Value::Float(self.float()?),
            0xcf => {
                self.at += 1;
                let v = self.be(8, W)?;
                i64::try_from(v).map_or(Value::UInt(v), Value::Int)
            }
            0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xce | 0xd0..=0xd3 => Value::Int(self.int()?),
            0xa0..=0xbf | 0xd9..=0xdb => Value::Str(self.string()?),
            0xc4..=0xc6 => Value::Bin(self.bin()?.to_vec()),
            0x90..=0x9f | 0xdc | 0xdd => {
                let n = self.array()?;
                let mut items = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    items.push(self.value()?);
                }
                Value::Array(items)
            }
            0x80..=0x8f | 0xde | 0xdf => {
                let n = self.map()?;
                let mut items = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    let k = self.value()?;
                    items.push((k, self.value()?));
                }
                Value::Map(items)
            }
            _ => return Err(Malformed("a supported value")),
        })
    }

    /// Skip one value of any type (without building it).
    pub fn skip(&mut self) -> Result<()> {
        const W: &str = "a value";
        let m = self.peek().ok_or(Malformed(W))?;
        match m {
            0xa0..=0xbf | 0xd9..=0xdb => {
                let n = self.str_len()?;
                self.take(n, "a string")?;
            }
            0xc4..=0xc6 => {
                self.bin()?;
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                for _ in 0..self.array()? {
                    self.skip()?;
                }
            }
            0x80..=0x8f | 0xde | 0xdf => {
                for _ in 0..2 * self.map()? {
                    self.skip()?;
                }
            }
            _ => {
                self.value()?;
            }
        }
        Ok(())
    }

    pub fn strings(&mut self) -> Result<Vec<String>> {
        let n = self.array()?;
        (0..n).map(|_| self.string()).collect()
    }

    pub fn ints(&mut self) -> Result<Vec<i64>> {
        let n = self.array()?;
        (0..n).map(|_| self.int()).collect()
    }
}

/// Read a packed list (empty bytes for none): a MessagePack array of arrays of `fields` fields, each read by
/// `item`; `what` names an item in the error of one of another length.
pub fn read_list<'a, T>(
    data: &'a [u8],
    fields: usize,
    what: &'static str,
    mut item: impl FnMut(&mut Reader<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader::new(data);
    let n = r.array()?;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        if r.array()? != fields {
            return Err(Malformed(what));
        }
        items.push(item(&mut r)?);
    }
    Ok(items)
}

/// A writer of one record.
#[derive(Default)]
pub struct Writer {
    pub out: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            out: Vec::with_capacity(n),
        }
    }

    pub fn nil(&mut self) {
        self.out.push(0xc0);
    }

    pub fn boolean(&mut self, v: bool) {
        self.out.push(if v { 0xc3 } else { 0xc2 });
    }

    pub fn int(&mut self, v: i64) {
        let o = &mut self.out;
        if v >= 0 {
            self.uint(v as u64);
        } else if v >= -32 {
            o.push(v as u8);
        } else if v >= -128 {
            o.push(0xd0);
            o.push(v as u8);
        } else if v >= -32768 {
            o.push(0xd1);
            o.extend_from_slice(&(v as i16).to_be_bytes());
        } else if v >= -(1 << 31) {
            o.push(0xd2);
            o.extend_from_slice(&(v as i32).to_be_bytes());
        } else {
            o.push(0xd3);
            o.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub fn uint(&mut self, v: u64) {
        let o = &mut self.out;
        if v < 128 {
            o.push(v as u8);
        } else if v < 256 {
            o.push(0xcc);
            o.push(v as u8);
        } else if v < 65536 {
            o.push(0xcd);
            o.extend_from_slice(&(v as u16).to_be_bytes());
        } else if v < (1 << 32) {
            o.push(0xce);
            o.extend_from_slice(&(v as u32).to_be_bytes());
        } else {
            o.push(0xcf);
            o.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub fn float(&mut self, v: f64) {
        self.out.push(0xcb);
        self.out.extend_from_slice(&v.to_bits().to_be_bytes());
    }

    fn header(&mut self, n: usize, fix: u8, fix_max: usize, m16: u8, m32: u8) {
        if n < fix_max {
            self.out.push(fix | n as u8);
        } else if n < 65536 {
            self.out.push(m16);
            self.out.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            self.out.push(m32);
            self.out.extend_from_slice(&(n as u32).to_be_bytes());
        }
    }

    pub fn str(&mut self, s: &str) {
        let n = s.len();
        if n < 32 {
            self.out.push(0xa0 | n as u8);
        } else if n < 256 {
            self.out.push(0xd9);
            self.out.push(n as u8);
        } else if n < 65536 {
            self.out.push(0xda);
            self.out.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            self.out.push(0xdb);
            self.out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        self.out.extend_from_slice(s.as_bytes());
    }

    pub fn bin(&mut self, b: &[u8]) {
        let n = b.len();
        if n < 256 {
            self.out.push(0xc4);
            self.out.push(n as u8);
        } else if n < 65536 {
            self.out.push(0xc5);
            self.out.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            self.out.push(0xc6);
            self.out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        self.out.extend_from_slice(b);
    }

    pub fn array(&mut self, n: usize) {
        self.header(n, 0x90, 16, 0xdc, 0xdd);
    }

    pub fn map(&mut self, n: usize) {
        self.header(n, 0x80, 16, 0xde, 0xdf);
    }

    /// Start a struct encoded as a map with ``fields`` fields in all; returns where to write its count later.
    pub fn struct_map(&mut self, fields: usize) -> usize {
        let at = self.out.len();
        if fields < 16 {
            self.out.push(0x80);
        } else {
            self.out.extend_from_slice(&[0xde, 0, 0]);
        }
        at
    }

    /// Write the number of fields a struct started at ``at`` holds.
    pub fn end_struct_map(&mut self, at: usize, count: usize) {
        if self.out[at] == 0xde {
            self.out[at + 1..at + 3].copy_from_slice(&(count as u16).to_be_bytes());
        } else {
            self.out[at] = 0x80 | count as u8;
        }
    }

    pub fn strings(&mut self, items: &[String]) {
        self.array(items.len());
        for s in items {
            self.str(s);
        }
    }

    pub fn ints(&mut self, items: &[i64]) {
        self.array(items.len());
        for &v in items {
            self.int(v);
        }
    }

    pub fn value(&mut self, v: &Value) {
        match v {
            Value::Nil => self.nil(),
            Value::Bool(b) => self.boolean(*b),
            Value::Int(i) => self.int(*i),
            Value::UInt(u) => self.uint(*u),
            Value::Float(f) => self.float(*f),
            Value::Str(s) => self.str(s),
            Value::Bin(b) => self.bin(b),
            Value::Array(items) => {
                self.array(items.len());
                for item in items {
                    self.value(item);
                }
            }
            Value::Map(items) => {
                self.map(items.len());
                for (k, item) in items {
                    self.value(k);
                    self.value(item);
                }
            }
        }
    }
}
