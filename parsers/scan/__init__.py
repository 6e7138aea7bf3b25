"""The scanner and the reader contract: what every parser and collector is (base: Reader, Parser, Collector, Context,
Hit, the regex helpers), the single pass that feeds them the lines they asked for (scanner), and its matching
backends (backends: hyperscan, Aho-Corasick or re)."""
