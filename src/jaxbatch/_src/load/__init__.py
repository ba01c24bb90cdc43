"""Loading: the C++ Loader, device prefetch and the processes' agreement."""
