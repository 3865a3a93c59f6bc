// EFF's large wordlist for passphrases (7,776 words: log2(7776) ≈ 12.9 bits per word), by
// Joseph Bonneau for the Electronic Frontier Foundation, 2016, under CC BY 3.0 US
// (https://www.eff.org/dice). Taken from the copy in xkcdpass 1.30.0 (PyPI,
// xkcdpass/static/eff-long), which lists the words of eff_large_wordlist.txt without their dice
// numbers, in the same order. `coffer generate --words N` draws from it.
//
// The words are in EFFWordList.txt, a resource embedded in the binary (`.embedInCode` in
// Package.swift): SwiftPM compiles it to a byte array, so nothing is looked up at run time.

/// The 7,776 words, one per line, lower case.
let effLargeWordList = String(decoding: PackageResources.EFFWordList_txt, as: UTF8.self)
