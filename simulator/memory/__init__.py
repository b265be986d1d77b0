"""What one GPU holds at its peak (DESIGN section 10; ../shared/simulator-layout.md)."""
