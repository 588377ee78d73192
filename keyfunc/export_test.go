package keyfunc

// ClientIP is clientIP, for the tests of the rules IP follows.
var ClientIP = clientIP
