// `CofferCrypto` — see DESIGN.md.
