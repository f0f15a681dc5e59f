// branches.cu: fixture source for tests/test_sass.py (see README.md for the commands).
// A switch that ptxas turns into BRX jump tables (nvdisasm names their BRANCH_TARGETS), BSSY/BSYNC
// reconvergence, and a loop with an early exit (a backward BRA).
__global__ void sw(int* p, int n) { int v = p[threadIdx.x]; int r;
 switch (v) { case 0: r = n*3; break; case 1: r = n+7; break; case 2: r = n^5; break; case 3: r = n<<2; break; case 4: r=n*n; break; case 5: r = n-9; break; case 6: r = n/3; break; case 7: r=n%7; break; default: r = 0; }
 for (int i = 0; i < n; i++) { if (p[i] > 3) { r += p[i+1]; if (r > 100) break; } }
 p[threadIdx.x] = r; }
