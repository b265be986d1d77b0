"""One training step as simpy processes, and its compute
(DESIGN section 10; ../shared/simulator-layout.md)."""
