/* The other half: b.c calls back into a.c. */
int a_once(int x);

int b_twice(int x)
{
    return 2 * a_once(x);
}
