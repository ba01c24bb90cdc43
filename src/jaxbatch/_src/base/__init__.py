"""What every layer uses: Ctrl-C handling and the wording of counts."""
